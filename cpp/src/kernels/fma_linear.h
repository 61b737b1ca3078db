// Row-invariant linear layers for CPUs without AVX512-BF16: y = x W^T (+ bias), fp32 accumulation,
// for fp32, fp16 and bf16 weights and the weight-only quantized formats of kernels/quant_format.h.
// std-only (the ATen side is model/fma_linear_op.h).
//
// Why: a decode step has few rows (1 for greedy, 2-16 for lookahead), where a linear layer is a
// stream over its weights; library GEMMs round a row differently at different row counts (so
// steps need a padding row), and oneDNN's bf16 path refuses CPUs without AVX-512. This kernel
// reads each weight once for up to 6 rows (12 on the avx512 path; more re-read it from cache) in
// the weights' own width (bf16/fp16 weights are widened to fp32 in registers: half the bytes of
// fp32; quantized values are widened there and scaled once per group).
//
// Exactness: every output element is one fixed sequence, whatever the row count, tile, column
// range or thread:  acc = 0; for k ascending: acc = acc + x[r][k] * w[c][k];  y = acc (+ bias[c]),
// where `+ *` is one fused multiply-add on the avx2 and avx512 paths and a product then a sum (no
// fusion) on the generic path. Quantized formats (groups of 32 inputs, values q, scale d, offset m) use
//   acc = 0; for each group ascending: s = 0; for k in the group's order: s = s + x[r][k] * q[c][k];
//                                      acc = acc + s * d[c];  kQ4 also: acc = acc + xsum * m[c]
// where the group's order is k ascending for kQ8 and (j, j + 16) for j = 0..15 for kQ4 (the two
// nibbles of a byte),
// and xsum the group's x[r][k] summed left to right (plain adds), so each weight costs one
// conversion and one multiply-add, and the scales one per group. kQ8C (one scale d per column):
//   acc = 0; for k ascending: acc = acc + x[r][k] * q[c][k];  y = acc * d[c] (+ bias[c])
// (the product and the sum rounded apart on every path). Rows therefore get the same bits
// at 1 row as at 100. The avx512 path runs the avx2 path's sequence on 16 lanes (a quantized
// block, or a pair of float blocks, per vector), so the two give the same bits; the generic path
// differs from both, so one process uses one kind for every step.
#pragma once

#include <cstdint>

#include "kernels/cpu_isa.h"

namespace pylookahead {

// kQ8, kQ4, kQ8A8: groups of 32 inputs with fp16 scales; kQ8C: int8 with one fp32 scale per
// output column (kernels/quant_format.h); k a multiple of 32. kQ8A8 quantizes the activations too
// and runs on kernels/int8_dot_linear.h.
enum class WeightFormat { kF32, kF16, kBF16, kQ8, kQ4, kQ8A8, kQ8C };

// Output columns per packed block: kFmaLinearBlock for the float formats, kQuantBlock for the
// quantized ones (a 512-bit vector of fp32 lanes; the 8-lane paths read it as two halves).
constexpr int64_t kFmaLinearBlock = 8;
constexpr int64_t kQuantBlock = 16;
constexpr int64_t fma_linear_block_cols(WeightFormat format) {
    return format == WeightFormat::kQ8 || format == WeightFormat::kQ4 ||
                   format == WeightFormat::kQ8A8 || format == WeightFormat::kQ8C
               ? kQuantBlock
               : kFmaLinearBlock;
}

// The path fma_linear_blocks() takes at `isa`: kAvx512 for any level >= kAvx512, kAvx2 for
// kAvx2, else kGeneric (and kGeneric for every level off x86-64).
CpuIsa fma_linear_path(CpuIsa isa);
// Whether a path reads `format` as it is. The generic path has no fp16 conversion: its fp16
// weights are packed as fp32 (exact widening, twice the bytes).
bool fma_linear_reads(CpuIsa path, WeightFormat format);

// Rows [0, rows) of y for the columns of packed blocks [b0, b1) (a thread's share; any split
// gives the same bits).
//   path      fma_linear_path() of the level in use
//   x         [rows, k] fp32, row r at x + r * x_stride
//   packed    float formats: W [n, k] as [ceil(n / 8), k, 8] in `format` (block b, k index i,
//             lane l holds W[8 b + l][i]; rows past n are zero); quantized formats: blocks of 16
//             columns as quant_format.h lays them out
//   bias      [n] fp32, or null
//   y         [rows, n] fp32, row r at y + r * y_stride; only columns < n are written
// Cost: rows * k * (b1 - b0) * fma_linear_block_cols(format) multiply-adds; reads the blocks'
// weights once per 6 rows (float formats on the avx512 path: 12; kQ4 from 13 rows on the 8-lane
// paths: once per 32).
void fma_linear_blocks(CpuIsa path, WeightFormat format, const float* x, int64_t rows,
                       int64_t x_stride, int64_t k, const void* packed, int64_t b0, int64_t b1,
                       const float* bias, float* y, int64_t y_stride, int64_t n);

}  // namespace pylookahead
