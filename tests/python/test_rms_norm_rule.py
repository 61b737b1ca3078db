"""kernels/rms_norm.h computes transformers' RMS norm (`xf = x.float(); xf * rsqrt(xf.pow(2).mean(-1) + eps)`, cast
back, times the weight) in one call with ATen's bits: the mean is ATen's CPU float sum (SumKernel.cpp's cascade over
8-lane vectors) divided by n. tests/cpp/rms_norm_test.cpp checks the kernel against golden bits; this checks that
those golden bits are the installed ATen's, and that the stated sum order is ATen's over many sizes, on whichever ATen
CPU capability is in force (the CI reruns under the AVX2 and generic caps take the other vector paths)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

EPS = 1e-5


def _golden_inputs(rows: int, n: int, salt: int) -> torch.Tensor:
    i = np.arange(rows * n, dtype=np.int64)
    x = (((i * 7919 + salt) % 2001) - 1000).astype(np.float32) / np.float32(1000)
    return torch.from_numpy(x.reshape(rows, n))


def _golden_weights(n: int) -> torch.Tensor:
    return torch.from_numpy((1 + (np.arange(n) % 7) / 8).astype(np.float32))


def _fnv1a(bits: np.ndarray) -> int:
    h = 0xCBF29CE484222325
    for b in bits.ravel().tolist():
        h = ((h ^ int(b)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _aten_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """transformers' LlamaRMSNorm, as model/transformer.cpp spells it for the ATen path."""
    xf = x.float()
    var = xf.pow(2).mean(-1, keepdim=True)
    return w * (xf * torch.rsqrt(var + EPS)).to(x.dtype)


@pytest.mark.parametrize(
    "n,bits",
    [(5, 0x406179B7), (37, 0x4144A78B), (576, 0x4340F59B), (896, 0x4395EDDC), (4096, 0x44AAD3E6), (20000, 0x45D089E8)],
)
def test_golden_sums_are_atens(n: int, bits: int) -> None:
    x = _golden_inputs(1, n, 0)
    got = x.pow(2).sum(-1).numpy().view(np.uint32)[0]
    assert got == bits, f"ATen's sum of squares for n={n}: {got:#x}, the C++ test's golden {bits:#x}"


@pytest.mark.parametrize(
    "dtype,n,digest",
    [
        (torch.float32, 37, 0xDC5BDF173A0E6DD6),
        (torch.float32, 576, 0x2462155DACECDAC8),
        (torch.bfloat16, 37, 0xD69734C386CC4D0C),
        (torch.bfloat16, 576, 0x9909A3082295E32D),
    ],
)
def test_golden_norms_are_atens(dtype: torch.dtype, n: int, digest: int) -> None:
    y = _aten_norm(_golden_inputs(3, n, 11).to(dtype), _golden_weights(n).to(dtype)).contiguous()
    view, mask = (torch.int16, 0xFFFF) if dtype == torch.bfloat16 else (torch.int32, 0xFFFFFFFF)
    got = _fnv1a(y.view(view).numpy().astype(np.int64) & mask)
    assert got == digest, f"ATen's {dtype} norm for n={n} hashes to {got:#x}, the C++ test's golden {digest:#x}"


def _ceil_log2(v: int) -> int:
    return 1 if v <= 2 else (v - 1).bit_length()


def _rule_sum(v: np.ndarray) -> np.float32:
    """The order kernels/rms_norm.h's aten_row_sum states, written out in float32 numpy."""
    v = np.asarray(v, np.float32)
    n = v.size
    lanes = 8 if n >= 8 else 1
    vec = v[: (n // lanes) * lanes].reshape(-1, lanes)
    groups = vec.shape[0] // 4
    power = max(4, _ceil_log2(groups) // 4)
    step, mask = 1 << power, (1 << power) - 1
    acc = np.zeros((4, 4, lanes), np.float32)  # [level][accumulator][lane]
    g = 0
    while g + step <= groups:
        for _ in range(step):
            acc[0] = acc[0] + vec[g * 4 : g * 4 + 4]
            g += 1
        for j in range(1, 4):
            acc[j] = acc[j] + acc[j - 1]
            acc[j - 1] = 0
            if g & (mask << (j * power)):
                break
    for g in range(g, groups):
        acc[0] = acc[0] + vec[g * 4 : g * 4 + 4]
    for j in range(1, 4):
        acc[0] = acc[0] + acc[j]
    part = acc[0][0].copy()
    for i in range(groups * 4, vec.shape[0]):
        part = part + vec[i]
    for k in range(1, 4):
        part = part + acc[0][k]
    total = np.float32(0)
    for e in v[vec.size :]:
        total = np.float32(total + e)
    for lane in part:
        total = np.float32(total + lane)
    return total


@pytest.mark.parametrize("n", [1, 3, 7, 8, 9, 16, 33, 64, 100, 511, 576, 896, 960, 1536, 2048, 3584, 5120, 8200, 70001])
def test_stated_sum_order_is_atens(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(3, n, generator=g) * 3
    aten = x.pow(2).sum(-1).numpy()
    sq = (x * x).numpy()
    rule = np.array([_rule_sum(row) for row in sq], np.float32)
    differ = np.flatnonzero(rule.view(np.uint32) != aten.view(np.uint32))
    assert differ.size == 0, f"n={n}: rows {differ.tolist()} differ: rule {rule[differ]}, ATen {aten[differ]}"
    # and the mean the norm uses is that sum divided by n
    mean = x.pow(2).mean(-1).numpy()
    assert (mean.view(np.uint32) == (aten / np.float32(n)).astype(np.float32).view(np.uint32)).all()
