"""The kernel behind the linear layers (docs/design.md, "Exactness"): which one a model gets, the
`linear_kernel` option that forces one, and that each keeps bf16 lookahead exact (the AVX512 one with a one-row
greedy step).

The bf16-avx512 kernel computes every output element with one fixed sequence of instructions whatever the row
count, so a greedy step runs 1 row (no padding) and must still give the bits that row gets inside a lookahead step.
The tiny checkpoints below have a vocabulary of 97 (not a multiple of the kernel's 16-column blocks) and Qwen2's
q/k/v biases, the two less common paths of the kernel.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from pylookahead import LookaheadConfig, Model, Session
from tiny_models import TINY_VOCAB_SIZE

pytestmark = pytest.mark.usefixtures("single_thread")


def cpu_has_avx512_bf16() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512_bf16"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float64"])
def test_linear_kernel_per_dtype(tiny_model_factory, dtype: str) -> None:
    info = Model(tiny_model_factory("qwen2", seed=5), dtype=dtype).info
    if dtype == "float64":
        assert info.linear_kernel == "aten"
    elif dtype == "bfloat16" and cpu_has_avx512_bf16():
        assert info.linear_kernel == "bf16-avx512"
    else:  # oneDNN when its packed linear passes the load-time row-invariance probe
        expected = {"onednn", "aten"} if torch.backends.mkldnn.is_available() else {"aten"}
        assert info.linear_kernel in expected
    assert info.packed_weights == (info.linear_kernel != "aten")


def varied_prompt(seed: int) -> list[int]:
    rng = random.Random(seed)
    phrase = [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(6)]
    return [1] + phrase * 2 + [rng.randrange(3, TINY_VOCAB_SIZE) for _ in range(5)] + phrase[:3]


def bf16_kernels() -> list[str]:
    kernels = ["aten"]
    if torch.backends.mkldnn.is_available():
        kernels.append("onednn")
    if cpu_has_avx512_bf16():
        kernels.append("bf16-avx512")
    return kernels


@pytest.mark.parametrize("kernel", bf16_kernels())
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_bf16_lookahead_equals_greedy_with_each_kernel(tiny_model_factory, arch: str, kernel: str) -> None:
    model = Model(tiny_model_factory(arch, seed=11), dtype="bfloat16", linear_kernel=kernel)
    assert model.info.linear_kernel == kernel
    session = Session(model)
    for seed in range(4):
        prompt = varied_prompt(seed)
        greedy = session.generate(prompt, 48)
        for w, n, g in [(0, 4, 2), (2, 3, 2), (4, 4, 4), (0, 6, 5)]:
            cfg = LookaheadConfig(window_size=w, ngram_size=n, verification_set_size=g)
            out = session.generate(prompt, 48, cfg)
            assert out.token_ids == greedy.token_ids, (arch, seed, (w, n, g))
            assert out.stats.steps <= greedy.stats.steps


@pytest.mark.parametrize(
    "dtype, kernel, pattern",
    [
        ("bfloat16", "mkl", r"linear_kernel must be one of auto, bf16-avx512, onednn, aten \(got 'mkl'\)"),
        ("float32", "bf16-avx512", r"linear_kernel 'bf16-avx512' needs dtype bfloat16 .*got dtype Float"),
        ("float64", "onednn", r"linear_kernel 'onednn' needs dtype bfloat16 or float32 .*got dtype Double"),
        ("bfloat16", 3, r"linear_kernel must be a str \(got 3\)"),
    ],
)
def test_bad_linear_kernel(tiny_model_factory, dtype: str, kernel, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        Model(tiny_model_factory("llama", seed=3), dtype=dtype, linear_kernel=kernel)


def test_aten_kernel_is_unpacked(tiny_model_factory) -> None:
    info = Model(tiny_model_factory("llama", seed=3), dtype="float32", linear_kernel="aten").info
    assert (info.linear_kernel, info.packed_weights) == ("aten", False)
