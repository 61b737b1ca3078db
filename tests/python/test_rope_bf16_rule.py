"""The rule kernels/rope.h's `rope_rows_bf16` computes (and tests/cpp/rope_test.cpp checks it against) is ATen's own
bf16 arithmetic for transformers' RoPE expression: each product and the sum computed in fp32 and rounded to bf16 on
its own. This checks that rule against ATen bitwise, on whichever ATen CPU capability is in force (the CI reruns
under the AVX2 and generic caps take the other vector paths), so the fused call gives the expression's bits."""

from __future__ import annotations

import numpy as np
import pytest
import torch


def _round_bf16(v: np.ndarray) -> np.ndarray:
    """float32 -> nearest bf16 (ties to even) -> float32; finite inputs."""
    u = v.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("rows,heads,d", [(1, 9, 64), (7, 3, 64), (16, 14, 64), (2, 2, 128)])
def test_aten_bf16_rope_expression_rounds_each_operation(rows: int, heads: int, d: int) -> None:
    g = torch.Generator().manual_seed(rows * 1000 + heads)
    x = (torch.randn(rows, heads, d, generator=g) * 8).to(torch.bfloat16)
    cos = torch.randn(rows, 1, d, generator=g).to(torch.bfloat16)
    sin = torch.randn(rows, 1, d, generator=g).to(torch.bfloat16)
    half = d // 2
    aten = (x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin).float().numpy()

    xf, cf, sf = x.float().numpy(), cos.float().numpy(), sin.float().numpy()
    rotated = np.concatenate([-xf[..., half:], xf[..., :half]], -1)
    rule = _round_bf16(_round_bf16(xf * cf) + _round_bf16(rotated * sf))
    mismatch = np.flatnonzero(rule.view(np.uint32) != aten.view(np.uint32))
    assert mismatch.size == 0, f"{mismatch.size} elements differ, first at flat index {mismatch[:1]}"
