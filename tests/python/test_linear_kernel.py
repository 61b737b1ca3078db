"""The kernel behind the linear layers (docs/design.md, "Exactness"): which one `auto` picks and why it passed
over the others, the `linear_kernel` option that forces one, the PYLOOKAHEAD_CPU_ISA cap, and that every kernel
that runs here keeps lookahead exact in bf16, fp16 and fp32.

The engine's own kernels (bf16-avx512, avx2, generic) compute every output element with one fixed sequence of
instructions whatever the row count, so a greedy step runs 1 row (no padding) and must still give the bits that
row gets inside a lookahead step. The tiny checkpoints below have a vocabulary of 97 (not a multiple of the
kernels' 8- and 16-column blocks) and Qwen2's q/k/v biases, the two less common paths of the kernels.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from kernel_support import ALL_KERNELS, kernels_here
from pylookahead import LookaheadConfig, Model, Session
from subproc import run_python
from tiny_models import TINY_VOCAB_SIZE

pytestmark = pytest.mark.usefixtures("single_thread")

ISA_LEVELS = ("generic", "avx2", "avx512", "avx512bf16")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_auto_takes_the_first_kernel_that_runs(tiny_model_factory, dtype: str) -> None:
    model_dir = tiny_model_factory("qwen2", seed=5)
    info = Model(model_dir, dtype=dtype).info
    here = kernels_here(model_dir, dtype)
    assert info.linear_kernel == here[0]
    assert info.packed_weights == (info.linear_kernel != "aten")
    assert info.cpu_isa in ISA_LEVELS
    # Every kernel before the chosen one is named with its reason, in order.
    before = ALL_KERNELS[: ALL_KERNELS.index(info.linear_kernel)]
    assert [s.split(": ", 1)[0] for s in info.linear_kernel_skipped] == list(before)
    assert all(s.split(": ", 1)[1] for s in info.linear_kernel_skipped)
    if dtype == "float64":
        assert info.linear_kernel == "aten"
    else:  # the engine's generic kernel runs for these dtypes on every CPU
        assert "generic" in here
    if info.cpu_isa in ("avx2", "avx512", "avx512bf16") and dtype != "float64":
        assert "avx2" in here
    if dtype == "bfloat16" and info.cpu_isa == "avx512bf16":
        assert info.linear_kernel == "bf16-avx512"


def varied_prompt(seed: int) -> list[int]:
    rng = random.Random(seed)
    phrase = [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(6)]
    return [1] + phrase * 2 + [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(5)] + phrase[:3]


# The dtypes each kernel takes (whether it runs on this CPU is asked of the engine).
_KERNEL_DTYPES = {"bf16-avx512": ("bfloat16",), "onednn": ("bfloat16", "float32")}


def _kernel_cases() -> list[tuple[str, str]]:
    return [(dtype, kernel) for kernel in ALL_KERNELS
            for dtype in _KERNEL_DTYPES.get(kernel, ("bfloat16", "float16", "float32"))]  # fmt: skip


@pytest.mark.parametrize("dtype, kernel", _kernel_cases())
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_lookahead_equals_greedy_with_each_kernel(tiny_model_factory, arch: str, dtype: str, kernel: str) -> None:
    model_dir = tiny_model_factory(arch, seed=11)
    if kernel not in kernels_here(model_dir, dtype):
        pytest.skip(f"linear_kernel {kernel!r} does not run for {dtype} here")
    model = Model(model_dir, dtype=dtype, linear_kernel=kernel)
    assert model.info.linear_kernel == kernel
    session = Session(model)
    for seed in range(4):
        prompt = varied_prompt(seed)
        greedy = session.generate(prompt, max_new_tokens=48)
        for w, n, g in [(0, 4, 2), (2, 3, 2), (4, 4, 4), (0, 6, 5)]:
            cfg = LookaheadConfig(window_size=w, ngram_size=n, verification_set_size=g)
            out = session.generate(prompt, max_new_tokens=48, lookahead=cfg)
            assert out.token_ids == greedy.token_ids, (arch, seed, (w, n, g))
            assert out.stats.steps <= greedy.stats.steps


@pytest.mark.parametrize(
    "dtype, kernel, pattern",
    [
        (
            "bfloat16",
            "mkl",
            r"linear_kernel must be one of auto, bf16-avx512, avx2, onednn, generic, aten \(got 'mkl'\)",
        ),
        ("float32", "bf16-avx512", r"linear_kernel 'bf16-avx512' needs dtype bfloat16 .*got dtype Float"),
        ("float64", "onednn", r"linear_kernel 'onednn' needs dtype bfloat16 or float32 .*got dtype Double"),
        ("float64", "avx2", r"linear_kernel 'avx2' needs dtype float32, float16 or bfloat16 .*got dtype Double"),
        ("float64", "generic", r"linear_kernel 'generic' needs dtype float32, float16 or bfloat16 .*got dtype Double"),
        ("bfloat16", 3, r"linear_kernel must be a str \(got 3\)"),
    ],
)
def test_bad_linear_kernel(tiny_model_factory, dtype: str, kernel, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        Model(tiny_model_factory("llama", seed=3), dtype=dtype, linear_kernel=kernel)


def test_aten_kernel_is_unpacked(tiny_model_factory) -> None:
    info = Model(tiny_model_factory("llama", seed=3), dtype="float32", linear_kernel="aten").info
    assert (info.linear_kernel, info.packed_weights) == ("aten", False)


# ---- the PYLOOKAHEAD_CPU_ISA cap (read once per process: each case runs in a child) ------------------------------

_CHILD = """
import json, sys
from pylookahead import Model
out = {}
for dtype in ("bfloat16", "float32"):
    info = Model(sys.argv[1], dtype=dtype).info
    out[dtype] = {"kernel": info.linear_kernel, "isa": info.cpu_isa, "skipped": list(info.linear_kernel_skipped)}
try:
    Model(sys.argv[1], dtype="bfloat16", linear_kernel="bf16-avx512")
    out["forced"] = "loaded"
except ValueError as e:
    out["forced"] = str(e)
print(json.dumps(out))
"""


def _run_capped(model_dir: Path, cap: str) -> subprocess.CompletedProcess[str]:
    return run_python(_CHILD, str(model_dir), env={"PYLOOKAHEAD_CPU_ISA": cap})


@pytest.mark.parametrize("cap", ["generic", "avx2"])
def test_cpu_isa_cap_moves_auto_to_the_lower_kernels(tiny_model_factory, cap: str) -> None:
    model_dir = tiny_model_factory("qwen2", seed=5)
    uncapped = Model(model_dir, dtype="bfloat16").info.cpu_isa
    if ISA_LEVELS.index(uncapped) < ISA_LEVELS.index(cap):
        pytest.skip(f"this CPU is {uncapped}, below the cap {cap}")
    proc = _run_capped(model_dir, cap)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["bfloat16"]["isa"] == cap
    assert out["bfloat16"]["kernel"] == cap  # the engine's kernel of that level: "avx2" or "generic"
    assert out["bfloat16"]["skipped"][0].startswith("bf16-avx512: needs AVX512F, AVX512BW, AVX512VL and AVX512-BF16 (")
    if cap == "generic":
        assert any(s.startswith("onednn: needs AVX-512 for bfloat16") for s in out["bfloat16"]["skipped"])
        assert any(s.startswith("avx2: needs AVX2, FMA and F16C") for s in out["bfloat16"]["skipped"])
    assert "linear_kernel 'bf16-avx512' needs AVX512F" in out["forced"]
    if uncapped == "avx512bf16":  # the CPU has bf16-avx512's features: the message names the cap
        assert f"capped by PYLOOKAHEAD_CPU_ISA={cap}" in out["forced"]
    else:  # the CPU itself lacks them, cap or not: the message names what it lacks
        assert "this CPU lacks" in out["forced"] and "avx512_bf16" in out["forced"]


def test_bad_cpu_isa_cap_is_a_value_error(tiny_model_factory) -> None:
    proc = _run_capped(tiny_model_factory("llama", seed=3), "avx1024")
    assert proc.returncode != 0
    assert (
        "ValueError: PYLOOKAHEAD_CPU_ISA must be one of generic, avx2, avx512, avx512bf16 (got 'avx1024')"
        in proc.stderr
    )
