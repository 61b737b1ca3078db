// Launchers of the kernels behind cuda/fused_ops.h: raw pointers, no CUDA or torch header.
// dtype: 0 float32, 1 bfloat16, 2 float16. stream: a cudaStream_t. Each throws std::runtime_error
// when its launch fails.
#pragma once

#include <cstdint>

namespace pylookahead {

// y[r] = w * round(x'[r] * rsqrt(mean(x'[r]^2) + eps)), x' = round(x + delta) written back to x
// when delta is non-null. Rows of `hidden` contiguous elements.
void launch_rms_norm(void* x, const void* delta, const void* w, void* y, int64_t rows,
                     int64_t hidden, float eps, int dtype, void* stream);
// y [T, heads, D] = round(round(x * cos) + round(rot(x) * sin)); x rows `x_row` apart, heads
// `x_head` apart, elements contiguous; cos, sin [T, D].
void launch_rope(const void* x, int64_t x_row, int64_t x_head, const void* cos, const void* sin,
                 void* y, int64_t rows, int64_t heads, int64_t head_dim, int dtype, void* stream);
// y [T, I] = round(round(silu(g)) * u), g = gu[:, :I], u = gu[:, I:].
void launch_silu_mul(const void* gu, void* y, int64_t rows, int64_t inter, int dtype, void* stream);

}  // namespace pylookahead
