"""Adversarial inputs get typed errors, never a crash, a hang, a narrowed value or undecodable text.

Each test fails without its fix (issue 16): Ctrl-C without a callback, num_threads' bound, messages with
non-UTF-8 bytes or a NUL, config integers outside the C int range, FIFOs in place of files, re-entering a
Session, save_pool over a symlink or a device, out-of-range ints at the bindings.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

import pylookahead
from pylookahead import LookaheadConfig, Model, ModelLoadError, Session, SessionBusyError, _core
from subproc import run_python

pytestmark = pytest.mark.usefixtures("single_thread")


def _copy(src: Path, dst: Path, **config: object) -> Path:
    """A copy of checkpoint `src` at `dst`, with `config` keys replaced in its config.json."""
    shutil.copytree(src, dst)
    if config:
        cfg = json.loads((dst / "config.json").read_text())
        cfg.update(config)
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


# ---- 1. Ctrl-C is honoured within a step without a callback ---------------------------------------------------

_SIGINT_CHILD = """
import os, signal, sys, threading, time
from pylookahead import Session
from pylookahead._core import GenerationConfig
# Ctrl-C as a user's shell delivers it: Python's own handler (a child of a test runner may inherit SIGINT
# ignored, and then Python installs none); the inherited one is reported on failure.
inherited = signal.getsignal(signal.SIGINT)
signal.signal(signal.SIGINT, signal.default_int_handler)
s = Session(sys.argv[1], kv_capacity=32768)
config = GenerationConfig()
config.max_new_tokens = int(sys.argv[2])
config.use_model_end_ids = False  # the tiny model would soon emit its end token
threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
t0 = time.monotonic()
try:
    s._session.generate([1, 5, 6, 7], config)  # the engine call Session.generate makes, without on_tokens
    print("finished", time.monotonic() - t0, "(inherited SIGINT handler:", inherited, ")")
except KeyboardInterrupt:
    print("interrupted", time.monotonic() - t0)
    # The session is usable afterwards.
    print("after", len(s.generate([1, 5, 6], max_new_tokens=3).token_ids))
"""


def test_ctrl_c_ends_generate_without_a_callback(tiny_llama: Path, tmp_path: Path) -> None:
    # A long generation (far more than a second of decoding) in a KV cache large enough for it.
    ckpt = _copy(tiny_llama, tmp_path / "ckpt", max_position_embeddings=32768)
    proc = run_python(_SIGINT_CHILD, str(ckpt), "30000", timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    kind, seconds = lines[0].split()[:2]
    assert kind == "interrupted", proc.stdout
    assert float(seconds) < 5.0, proc.stdout  # SIGINT at 1 s; one step and a 50 ms check later
    assert lines[1] == "after 3"


# ---- 2. num_threads is bounded by the machine's CPUs -------------------------------------------------------------


def test_num_threads_above_the_cpu_count_is_a_value_error(tiny_llama: Path) -> None:
    cpus = os.cpu_count() or 1
    with pytest.raises(ValueError, match=rf"num_threads must be <= {cpus} \(this machine's CPUs\) \(got 100000\)"):
        Model(tiny_llama, num_threads=100000)


# ---- 3. messages carrying file bytes stay valid UTF-8, whole ------------------------------------------------------


def _write_safetensors(path: Path, header: bytes, body: bytes = b"") -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header + body)


def test_non_utf8_bytes_in_a_header_are_escaped(tiny_llama: Path, tmp_path: Path) -> None:
    ckpt = _copy(tiny_llama, tmp_path / "ckpt")
    _write_safetensors(
        ckpt / "model.safetensors", b'{"w\xff\xfe": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}'
    )
    with pytest.raises(ModelLoadError) as info:
        Model(ckpt)
    assert "\\xff" in str(info.value)


def test_nul_in_a_tensor_name_does_not_cut_the_message(tiny_llama: Path, tmp_path: Path) -> None:
    ckpt = _copy(tiny_llama, tmp_path / "ckpt")
    header = json.dumps({"a\u0000b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    _write_safetensors(ckpt / "model.safetensors", header, b"\0" * 4)
    with pytest.raises(ModelLoadError) as info:
        Model(ckpt)
    message = str(info.value)
    assert "a\\x00b" in message or "model.embed_tokens.weight" in message  # the name, whole, or the missing tensor
    assert "\x00" not in message


def test_non_utf8_bytes_in_config_json_are_escaped(tiny_llama: Path, tmp_path: Path) -> None:
    ckpt = _copy(tiny_llama, tmp_path / "ckpt")
    (ckpt / "config.json").write_bytes(b'{"architectures": ["Llama\xff\xfe"]}')
    with pytest.raises(ModelLoadError, match="config.json: not valid JSON") as info:
        Model(ckpt)
    assert "\\x" in str(info.value)  # the bytes the parser quotes, escaped


# ---- 4. config.json integers are never narrowed -------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value",
    [
        ("num_hidden_layers", 2**32 + 1),
        ("vocab_size", 2**32 + 32),
        ("hidden_size", 2**31),
        ("eos_token_id", 2**40),
        ("max_position_embeddings", 2**63),
        ("num_attention_heads", -1),
    ],
)
def test_config_integers_out_of_range_are_refused(tiny_llama: Path, tmp_path: Path, key: str, value: int) -> None:
    ckpt = _copy(tiny_llama, tmp_path / "ckpt", **{key: value})
    (ckpt / "generation_config.json").unlink(missing_ok=True)
    with pytest.raises(ModelLoadError, match=rf"key '{key}' must be an integer in \[0, 2147483647\] \(found {value}\)"):
        Model(ckpt)


def test_kv_capacity_is_bounded(tiny_llama: Path, tmp_path: Path) -> None:
    model = Model(_copy(tiny_llama, tmp_path / "ckpt", max_position_embeddings=2**31 - 1))
    with pytest.raises(ValueError, match=r"kv_capacity must be <= 16777216"):
        Session(model, kv_capacity=2**31 - 1)


# ---- 5. a FIFO in place of a file is refused, not waited on -------------------------------------------------------


@pytest.mark.parametrize("name", ["config.json", "generation_config.json", "model.safetensors.index.json"])
def test_fifo_in_place_of_a_checkpoint_file(tiny_llama: Path, tmp_path: Path, name: str) -> None:
    ckpt = _copy(tiny_llama, tmp_path / "ckpt")
    (ckpt / name).unlink(missing_ok=True)
    os.mkfifo(ckpt / name)
    with pytest.raises(ModelLoadError, match=rf"{name}: not a regular file"):
        Model(ckpt)


def test_fifo_as_a_pool_file(tiny_llama: Path, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pool.bin")
    with pytest.raises(ValueError, match=r"pool.bin: not a regular file"):
        Session(tiny_llama).load_pool(str(tmp_path / "pool.bin"))


# ---- 6. re-entering a Session is a typed "busy" error ---------------------------------------------------------------


def test_reentering_a_core_session_from_its_callback(tiny_llama: Path) -> None:
    core = Session(tiny_llama)._session
    seen: list[BaseException] = []

    def on_tokens(ids: list[int]) -> bool:
        try:
            core.generate([1, 2, 3], _core.GenerationConfig())
        except BaseException as e:  # noqa: BLE001 - recorded and checked below
            seen.append(e)
        return False

    core.generate([1, 5, 6], _core.GenerationConfig(), None, on_tokens)
    assert len(seen) == 1 and isinstance(seen[0], SessionBusyError), seen
    assert "this Session is busy" in str(seen[0])
    assert issubclass(SessionBusyError, RuntimeError)
    assert len(core.generate([1, 5, 6], _core.GenerationConfig()).token_ids) > 0  # usable afterwards


def test_python_session_busy_is_the_same_type(tiny_llama: Path) -> None:
    s = Session(tiny_llama)
    with pytest.raises(SessionBusyError, match="Session is busy"):
        s.generate([1, 5, 6], max_new_tokens=8, on_tokens=lambda ids: s.generate([1, 2], max_new_tokens=2) and None)


# ---- 7. save_pool writes through symlinks and refuses non-regular targets -------------------------------------------


def test_save_pool_follows_a_symlink(tiny_llama: Path, tmp_path: Path) -> None:
    s = Session(tiny_llama)
    la = LookaheadConfig(window_size=2, ngram_size=3, verification_set_size=2)
    s.generate([1, 5, 6, 7, 5, 6, 7], max_new_tokens=16, lookahead=la, keep_pool=True)
    real = tmp_path / "data" / "pool.bin"
    real.parent.mkdir()
    real.write_bytes(b"old")
    link = tmp_path / "pool-link.bin"
    link.symlink_to(real)
    s.save_pool(str(link))
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert real.read_bytes().startswith(b"PYLAPOOL")
    Session(tiny_llama).load_pool(str(link))


def test_save_pool_refuses_a_non_regular_target(tiny_llama: Path, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    s = Session(tiny_llama)
    for target in ("fifo", "dir"):
        with pytest.raises(ValueError, match="exists and is not a regular file"):
            s.save_pool(str(tmp_path / target))
    assert (tmp_path / "fifo").is_fifo()


# ---- 8. ints outside the C int range are ValueErrors naming the field ------------------------------------------------

INT_RANGE = r"\[-2147483648, 2147483647\]"


@pytest.mark.parametrize(
    "call, pattern",
    [
        (
            lambda s: s.generate([1, 2], max_new_tokens=2**31),
            rf"max_new_tokens must be in {INT_RANGE} \(got 2147483648\)",
        ),
        (lambda s: s.generate([1, 2], top_k=-(2**31) - 1), rf"top_k must be in {INT_RANGE} \(got -2147483649\)"),
        (
            lambda s: s.generate([1, 2], temperature=0.5, seed=2**64),
            r"seed must be in \[0, 18446744073709551615\] \(got 18446744073709551616\)",
        ),
        (
            lambda s: s.generate([1, 2], stop_token_ids=[2**40]),
            rf"stop_token_ids\[0\] must be in {INT_RANGE} \(got 1099511627776\)",
        ),
        (lambda s: s.generate([1, 2**40]), rf"prompt\[1\] must be in {INT_RANGE} \(got 1099511627776\)"),
        (lambda s: s.generate([1, 2], temperature=10**400), r"temperature must be in the range of a C double"),
        (lambda s: LookaheadConfig(window_size=2**31), rf"window_size must be in {INT_RANGE}"),
        (lambda s: LookaheadConfig(seed=2**64), r"seed must be in \[0, 18446744073709551615\]"),
        (lambda s: LookaheadConfig(ngram_size="4"), r"ngram_size must be an int \(got '4'\)"),
        (lambda s: pylookahead.AutoLookahead(probe_steps=-(2**40)), r"probe_steps must be in"),
    ],
)
def test_out_of_range_ints_are_value_errors(tiny_llama: Path, call, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        call(Session(tiny_llama))


# ---- under contention: the thread governor keeps lookahead exact ----------------------------------------------------


def test_lookahead_equals_greedy_with_the_thread_governor_on(tiny_model_factory) -> None:
    """Two threads, so the governor probes and may switch decode steps between 2 threads and 1 (on a tiny model
    one thread is usually faster): rows must get the same bits either way (lookahead/thread_governor.h)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for arch in ("llama", "qwen2"):
            for dtype in ("bfloat16", "float32"):
                session = Session(Model(tiny_model_factory(arch, seed=21), dtype=dtype))
                for seed in range(3):
                    prompt = [1] + [3 + (seed * 7 + i * 5) % 90 for i in range(12)] * 2
                    greedy = session.generate(prompt, max_new_tokens=160)
                    for cfg in [(0, 4, 2), (2, 3, 2), (4, 4, 4)]:
                        la = LookaheadConfig(window_size=cfg[0], ngram_size=cfg[1], verification_set_size=cfg[2])
                        out = session.generate(prompt, max_new_tokens=160, lookahead=la)
                        assert out.token_ids == greedy.token_ids, (arch, dtype, seed, cfg)
    finally:
        torch.set_num_threads(previous)
