// The exact argmax of a row of logits y = x W^T without computing every column exactly: the
// lm_head screen. std-only.
//
// Why: on a CPU a greedy step streams the whole lm_head (Qwen2.5-0.5B: 136M weights, a quarter of
// the model), yet only the argmax of each row is read. The screen streams an int8 copy of W (kQ8:
// groups of 32 inputs, fp16 scales; about half the bytes of bf16, a quarter of fp32) and
// computes A_c, an approximation of each column, with a bound proven for every column:
//     |L_c - A_c| <= |x|_1 * beta_c
// where L_c is the column as fma_linear_blocks computes it from the exact weights (before any
// rounding of the logits to bf16). Only the columns that can still be the argmax are computed
// exactly (those whose upper bound reaches the largest lower bound, widened by the bf16 rounding
// of the logits); the argmax over those exact values (first index of the maximum) is the argmax
// of the full row, bit for bit.
//
// The bound: with w~ the dequantized int8 weights, e_c = max_k |w_ck - w~_ck| and
// M_c = max_k |w_ck| (both from the packed values, in double),
//   |T_c - T~_c| <= e_c |x|_1          (T, T~: the exact real dot products with w and w~)
//   |L_c - T_c|  <= g |x|_1 M_c        (the kernel's fp32 chain over k terms, fused or not)
//   |A_c - T~_c| <= g |x|_1 (M_c + e_c) (the int8 kernel's chain: k products, k/32 group scales)
// with g = (k + k/16 + 64) * 2^-23, at least twice the standard (n u) bound of a sum of n
// rounded terms; beta_c = e_c + g (2 M_c + e_c), rounded up to fp32.
#pragma once

#include <cstdint>

#include "kernels/cpu_isa.h"
#include "kernels/fma_linear.h"

namespace pylookahead {

// Packs columns [0, cols) of W ([cols, k] fp32, row c = column c; k a multiple of 32, cols a
// multiple of kQuantBlock unless it ends W) as kQ8 into `q8` (quant_packed_bytes(kQ8, cols, k)
// bytes) and writes beta[c]. A run of whole blocks of W may be packed on its own (threads).
// Returns false if some weight is not finite (no bound then: the screen must not be used).
bool argmax_screen_pack(const float* w, int64_t cols, int64_t k, unsigned char* q8, float* beta);

// The exact argmax of one row, or -1 when the screen cannot decide it (the caller then computes
// the whole row): x or an approximation not finite, the bound overflowing, or more than
// `max_candidates` columns left after the screen.
//   path, format, packed, n   the exact weights as fma_linear_blocks() reads them, n columns
//   x          [k] fp32, the row's input (exactly what the kernel would read)
//   approx     [n] fp32, the kQ8 copy's outputs for x (fma_linear_blocks with WeightFormat::kQ8)
//   beta       [n], from argmax_screen_pack
//   round_bf16 the caller's logits are rounded to bf16 before its argmax (ties widen)
//   scratch    [n] fp32, overwritten
//   candidates out: columns computed exactly (for statistics), or null
// Cost: two passes over approx and beta, and k * 8 multiply-adds per candidate block of 8 columns.
int32_t argmax_screen_pick(CpuIsa path, WeightFormat format, const void* packed, int64_t n,
                           int64_t k, const float* x, const float* approx, const float* beta,
                           bool round_bf16, int64_t max_candidates, float* scratch,
                           int64_t* candidates);

}  // namespace pylookahead
