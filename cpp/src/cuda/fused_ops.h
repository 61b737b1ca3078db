// Elementwise and per-row operations of a layer as one CUDA kernel each, where ATen runs several:
// RMS norm (with the residual add before it), RoPE of q and k, SiLU(gate) * up. Each computes
// transformers' expression with the same roundings in the model's dtype (each bf16 / fp16 result of
// the expression rounded where ATen would round it), and a row's result depends on that row alone,
// with one fixed order of operations: prefill and decode steps on CUDA both use them, so a token's
// bits do not depend on which kind of pass computed it. Tensors in, tensors out; CUDA headers stay
// in cuda/*.cpp and *.cu.
#pragma once

#include <ATen/ATen.h>

namespace pylookahead {

// x [T, hidden] contiguous; weight [hidden]; -> weight * (x * rsqrt(mean(x^2) + eps)) in x's dtype.
at::Tensor cuda_rms_norm(const at::Tensor& x, const at::Tensor& weight, float eps);
// x += delta (in place, rounded to x's dtype), then cuda_rms_norm(x). delta like x.
at::Tensor cuda_add_rms_norm(at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                             float eps);
// x [T, heads, D] with stride(2) == 1 (a view of the fused qkv); cos, sin [T, 1, D] contiguous in
// x's dtype -> x * cos + cat(-x2, x1) * sin, [T, heads, D] contiguous.
at::Tensor cuda_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// gu [T, 2I] contiguous -> silu(gu[:, :I]) * gu[:, I:], [T, I].
at::Tensor cuda_silu_mul(const at::Tensor& gu, int64_t inter);

}  // namespace pylookahead
