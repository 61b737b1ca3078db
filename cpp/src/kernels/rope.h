// Rotary embedding of fp32 or bf16 rows (transformers' rotate_half form) as one call: a step's ~8
// small ATen operators per q or k become one. One fixed sequence per element, the ATen expression's, so
// the bits are those of `x * cos + cat(-x2, x1) * sin`. std-only; the ATen side is
// model/transformer.cpp, which takes it for fp32 and bf16 activations on the CPU.
#pragma once

#include <cstdint>

#include "kernels/bf16.h"

namespace pylookahead {

// For each row t, head h, i < d / 2:
//   y[t][h][i]         = x[i] * cos[t][i]             + (-x[i + d/2]) * sin[t][i]
//   y[t][h][i + d/2]   = x[i + d/2] * cos[t][i + d/2] + x[i] * sin[t][i + d/2]
// each product and the sum rounded on their own (no fusion).
//   x  [rows, heads, d] at x + t * row_stride + h * d;  cos, sin [rows, d] contiguous;
//   y  [rows, heads, d] contiguous (not aliasing x); d even.
void rope_rows(const float* x, int64_t rows, int64_t heads, int64_t d, int64_t row_stride,
               const float* cos, const float* sin, float* y);

// The same on bf16 values (raw bits), with ATen's bf16 arithmetic: each product and the sum is
// computed in fp32 from bf16 operands and rounded to bf16 (nearest even) on its own. NaN becomes
// 0x7fc0 (c10::BFloat16's scalar rule; ATen's vector paths spell NaN differently).
void rope_rows_bf16(const uint16_t* x, int64_t rows, int64_t heads, int64_t d, int64_t row_stride,
                    const uint16_t* cos, const uint16_t* sin, uint16_t* y);

}  // namespace pylookahead
