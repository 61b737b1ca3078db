"""`python -m pylookahead generate`: lookahead vs greedy comparison on a tiny checkpoint, and the error path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from subproc import run_pylookahead as run_cli


def test_generate_compare_greedy(tiny_llama: Path) -> None:
    result = run_cli(
        "generate", "--model", str(tiny_llama), "--prompt", "the cat sat on the mat and the cat",
        "--max-new-tokens", "8", "--compare-greedy", "-W", "2", "-N", "3", "-G", "2", "--threads", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    summary = r"\] 8 new tokens, \d+ steps \([\d.]+ tokens/step\), [\d.]+ tok/s \(prefill \d+ ms, decode [\d.]+ s\)"
    lookahead_line = next(line for line in lines if line.startswith("[lookahead"))
    assert "window_size=2, ngram_size=3, verification_set_size=2" in lookahead_line
    assert re.search(summary, lookahead_line), lookahead_line
    greedy_line = next(line for line in lines if line.startswith("[greedy]"))
    assert re.search(r"8 new tokens, 7 steps \(1\.00 tokens/step\)", greedy_line), greedy_line
    assert any(re.fullmatch(r"identical output; lookahead / greedy speed = [\d.]+x", line) for line in lines), lines
    assert "MISMATCH" not in result.stdout
    # The generated text comes first: 8 words of the tiny word-level vocabulary.
    assert len(lines[0].split()) == 8, lines[0]


def test_generate_verification_only(tiny_llama: Path) -> None:
    result = run_cli(
        "generate", "--model", str(tiny_llama), "--prompt", "the cat sat on the mat and the cat sat on the",
        "--max-new-tokens", "8", "--compare-greedy", "-W", "0", "-N", "3", "-G", "2", "--threads", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert any("window_size=0, ngram_size=3, verification_set_size=2" in line for line in result.stdout.splitlines())
    assert any(line.startswith("identical output;") for line in result.stdout.splitlines()), result.stdout


def test_generate_greedy_only(tiny_llama: Path) -> None:
    result = run_cli("generate", "--model", str(tiny_llama), "--prompt", "hello world", "--max-new-tokens", "5",
                     "--greedy", "--threads", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert any(line.startswith("[greedy] 5 new tokens, 4 steps") for line in result.stdout.splitlines())


@pytest.mark.parametrize("flag", [None, "--no-lm-head-screen"])
def test_generate_reports_the_lm_head_screen(tiny_llama: Path, flag: str | None) -> None:
    result = run_cli("generate", "--model", str(tiny_llama), "--prompt", "hello world", "--max-new-tokens", "5",
                     "--greedy", "--threads", "1", *([flag] if flag else []))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"lm_head screen {'off' if flag else 'on'})" in result.stderr, result.stderr


def test_missing_model_dir_exits_with_2(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    result = run_cli("generate", "--model", str(missing), "--prompt", "hi", "--max-new-tokens", "4")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "pylookahead: error:" in result.stderr
    assert str(missing) in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("flag", "value", "field"), [("-N", "1", "ngram_size"), ("-W", "-1", "window_size")])
def test_bad_lookahead_flags_exit_with_2(tiny_llama: Path, flag: str, value: str, field: str) -> None:
    result = run_cli("generate", "--model", str(tiny_llama), "--prompt", "hi", flag, value)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert re.search(rf"pylookahead: error: .*{field}.*\(got {value}\)", result.stderr), result.stderr


def test_generate_stream_sampled_with_a_stop(tiny_llama: Path) -> None:
    base = ["generate", "--model", str(tiny_llama), "--prompt", "the cat sat on the mat and the cat",
            "--max-new-tokens", "12", "-W", "2", "-N", "3", "-G", "2", "--threads", "1",
            "--temperature", "0.9", "--seed", "3"]  # fmt: skip
    full = run_cli(*base, "--compare-greedy")
    assert full.returncode == 0, full.stderr
    assert "identical output" in full.stdout and "[plain sampling]" in full.stdout
    words = full.stdout.splitlines()[0].split()
    streamed = run_cli(*base, "--stream", "--stop", words[3])
    assert streamed.returncode == 0, streamed.stderr
    # Streamed text stops right before the first occurrence of the stop word.
    first = words.index(words[3])
    assert streamed.stdout.splitlines()[0].split() == words[:first]


def test_cuda_flags_are_passed_and_checked(tiny_llama: Path) -> None:
    """--cuda-step-rows reaches the Session (checked there on every device; it changes nothing on the CPU)."""
    ok = run_cli("generate", "--model", str(tiny_llama), "--prompt", "hello world", "--max-new-tokens", "5",
                 "--greedy", "--threads", "1", "--cuda-step-rows", "8", "--no-cuda-graphs")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    bad = run_cli("generate", "--model", str(tiny_llama), "--prompt", "hi", "--cuda-step-rows", "0")
    assert bad.returncode == 2, (bad.stdout, bad.stderr)
    assert "cuda_step_rows must be in 1 .. 1024 (got 0)" in bad.stderr, bad.stderr
