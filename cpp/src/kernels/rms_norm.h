// RMS norm of fp32 or bf16 rows as one call, optionally after the residual add that precedes it:
// the ~10 small ATen operators of transformers' LlamaRMSNorm (plus the add) per call become one.
// The bits are those of the ATen expression model/transformer.cpp used before (and transformers
// uses), on every ATen CPU capability:
//   xf = x.float(); var = xf.pow(2).mean(-1, keepdim); xf = xf * rsqrt(var + eps);
//   y = weight * xf.to(x.dtype)
// The mean is sum / n with ATen's CPU float sum order (aten_row_sum below);
// tests/python/test_rms_norm_rule.py checks that order against ATen. std-only, single-threaded,
// O(rows * n); each row's result depends on that row alone (row-invariant).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/bf16.h"

namespace pylookahead {

// The fp32 sum ATen's CPU reduction gives a contiguous row of `n` summands (`term(i)`, i < n):
// SumKernel.cpp's cascade_sum over 8-lane vectors (scalars when n < 8), 4 interleaved
// accumulators, chunks of 16 summed level by level, then the scalar tail and the lanes in order.
// Exposed for the tests; `term` is called once per index.
template <typename Term>
float aten_row_sum(int64_t n, const Term& term);

// 8 fp32 lanes (GNU vector extension; plain SSE2 / NEON code on a generic build). Lane l of a
// vector operation is the scalar operation on lane l, so a loop over these has the bits of the
// scalar loop it replaces.
using RowSumVec = float __attribute__((vector_size(32)));
// The same sum with the terms given 8 at a time too: `term8(i)` is {term(i), ..., term(i + 7)}
// (taken for whole 8-lane vectors; `term` for the rest). Same bits, in vector operations.
template <typename Term, typename Term8>
float aten_row_sum(int64_t n, const Term& term, const Term8& term8);

// y[t] = rms_norm(x[t]) * w for rows t < rows of n values; x, y contiguous [rows, n] (y may be x).
void rms_norm_rows(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y);
void rms_norm_rows_bf16(const uint16_t* x, int64_t rows, int64_t n, const uint16_t* w, float eps,
                        uint16_t* y);

// x[t] += d[t] (in x's dtype: bf16 rounds the fp32 sum, as ATen's add), then y[t] = rms_norm(x[t])
// * w. x is updated in place; x, d, y contiguous [rows, n]; y aliases neither x nor d.
void add_rms_norm_rows(float* x, const float* d, int64_t rows, int64_t n, const float* w, float eps,
                       float* y);
void add_rms_norm_rows_bf16(uint16_t* x, const uint16_t* d, int64_t rows, int64_t n,
                            const uint16_t* w, float eps, uint16_t* y);

// ---- implementation of the templates above ----

namespace detail {
inline int ceil_log2(int64_t v) {
    if (v <= 2) return 1;
    return 64 - __builtin_clzll(static_cast<unsigned long long>(v - 1));
}
}  // namespace detail

template <typename Term, typename Term8>
float aten_row_sum(int64_t n, const Term& term, const Term8& term8) {
    constexpr int kLanes = 8, kIlp = 4, kLevels = 4;
    const int lanes = n >= kLanes ? kLanes : 1;
    const int64_t vectors = n / lanes, groups = vectors / kIlp;
    const int level_power = std::max(4, detail::ceil_log2(groups) / kLevels);
    const int64_t level_step = int64_t{1} << level_power, level_mask = level_step - 1;
    // acc[level][k]: accumulator k of the ILP group, at a cascade level (lane 0 only when the
    // vectors are single terms: the other lanes then add zeros and are never read)
    RowSumVec acc[kLevels][kIlp] = {};
    auto vector_at = [&](int64_t v) {
        return lanes == kLanes ? term8(v * kLanes) : RowSumVec{term(v)};
    };
    int64_t g = 0;
    while (g + level_step <= groups) {
        for (int64_t s = 0; s < level_step; ++s, ++g) {
            for (int k = 0; k < kIlp; ++k) acc[0][k] = acc[0][k] + vector_at(g * kIlp + k);
        }
        for (int j = 1; j < kLevels; ++j) {
            for (int k = 0; k < kIlp; ++k) {
                acc[j][k] = acc[j][k] + acc[j - 1][k];
                acc[j - 1][k] = RowSumVec{};
            }
            if ((g & (level_mask << (j * level_power))) != 0) break;
        }
    }
    for (; g < groups; ++g) {
        for (int k = 0; k < kIlp; ++k) acc[0][k] = acc[0][k] + vector_at(g * kIlp + k);
    }
    for (int j = 1; j < kLevels; ++j) {
        for (int k = 0; k < kIlp; ++k) acc[0][k] = acc[0][k] + acc[j][k];
    }
    RowSumVec part = acc[0][0];
    for (int64_t v = groups * kIlp; v < vectors; ++v) part = part + vector_at(v);
    for (int k = 1; k < kIlp; ++k) part = part + acc[0][k];
    float total = 0.0f;
    for (int64_t i = vectors * lanes; i < n; ++i) total = total + term(i);
    for (int l = 0; l < lanes; ++l) total = total + part[l];
    return total;
}

template <typename Term>
float aten_row_sum(int64_t n, const Term& term) {
    return aten_row_sum(n, term, [&](int64_t i) {
        RowSumVec v;
        for (int l = 0; l < 8; ++l) v[l] = term(i + l);
        return v;
    });
}

}  // namespace pylookahead
