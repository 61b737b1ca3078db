// Row-invariant linear layers on int8 weights and int8 activations (WeightFormat::kQ8A8 of
// kernels/quant_format.h): y = x W^T (+ bias) with x quantized per row and group of 32 inputs at
// each call (the rule of llama.cpp's Q8_0 activations) and integer dot products. std-only.
//
// Why: weight-only int8 (kQ8 on fma_linear.h) widens every weight to fp32 before its multiply-add,
// three vector instructions per 16 weights per row; an integer dot product takes 64 int8 products
// per instruction (AVX512-VNNI VPDPBUSD; AVX-VNNI 32; on AVX2, VPMADDUBSW + VPMADDWD 32 in three), so a
// step stays bound by the weights' bytes, and extra rows (lookahead's) cost little until many.
//
// Contract, per output element (row r, column c), the same on every path, at every row count,
// tile, column range and thread:
//   per group g of 32 inputs, once per row:
//     amax = max |x[r][k]|;  da = amax / 127;  ia = da != 0 ? 1 / da : 0
//     a[k] = nearest-even(x[r][k] * ia) clamped to [-127, 127]   (0 where x * ia is NaN)
//   acc = 0; for g ascending: isum = sum over the group of q[c][k] * a[k]   (int32: exact)
//                             acc = acc + float(isum) * (d[c][g] * da)
//   y = acc (+ bias[c])
// where each float operation rounds on its own (no fusion). The integer sums are exact in any
// order and the float steps are the same IEEE operations on every path, so all paths give the
// same bits, and a row's bits do not depend on the other rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu_isa.h"

namespace pylookahead {

// One row of x [k] quantized as the contract says: q [k] int8, per group g of 32 inputs its
// scale da[g] and the sum of its values qsum[g]. k a multiple of 32.
void int8_dot_quantize_row(const float* x, int64_t k, int8_t* q, float* da, int32_t* qsum);

// Which instructions int8_dot_linear_blocks() takes on the fma_linear_path() `path`, by what the
// CPU has: "vnni" (AVX512-VNNI VPDPBUSD on zmm, path avx512), "avxvnni" (AVX-VNNI VPDPBUSD on
// ymm, Intel's client CPUs from Alder Lake on), "avx2" (VPMADDUBSW + VPMADDWD) or "generic".
const char* int8_dot_linear_kind(CpuIsa path);
// Every kind this CPU runs under the cap in force ("generic" first). All give the same bits.
std::vector<std::string> int8_dot_linear_kinds_here();

// Rows [0, rows) of y for the columns of packed blocks [b0, b1) (a thread's share; any split
// gives the same bits). Arguments as fma_linear_blocks() with format kQ8A8: x [rows, k] fp32 at
// x + r * x_stride, k a multiple of 32; y [rows, n] fp32 at y + r * y_stride, only columns < n.
// Cost: rows * k fp32 to quantize (per call, per thread) and rows * k * 16 * (b1 - b0) int8
// products; reads the blocks' weights once per 8 rows (once per call from memory: more rows
// re-read each block from cache).
void int8_dot_linear_blocks(CpuIsa path, const float* x, int64_t rows, int64_t x_stride, int64_t k,
                            const void* packed, int64_t b0, int64_t b1, const float* bias, float* y,
                            int64_t y_stride, int64_t n);
// The same on the kind named (one of int8_dot_linear_kinds_here(); tests take each in turn).
void int8_dot_linear_blocks_as(const std::string& kind, const float* x, int64_t rows,
                               int64_t x_stride, int64_t k, const void* packed, int64_t b0,
                               int64_t b1, const float* bias, float* y, int64_t y_stride,
                               int64_t n);

}  // namespace pylookahead
