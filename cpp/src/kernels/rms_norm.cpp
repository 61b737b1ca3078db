#include "kernels/rms_norm.h"

#include <cmath>

namespace pylookahead {

namespace {

// The one row loop of both element types (as in rope.cpp): `load` widens an element to fp32,
// `round` keeps of an fp32 intermediate what the element type stores, `store` narrows a result.
// With d, x[t] += d[t] first (written back to x).
template <typename T, typename Load, typename Round, typename Store>
void rms_norm_impl(T* x, const T* d, int64_t rows, int64_t n, const T* w, float eps, T* y,
                   Load load, Round round, Store store) {
    for (int64_t t = 0; t < rows; ++t) {
        T* xr = x + t * n;
        if (d != nullptr) {
            const T* dr = d + t * n;
            for (int64_t i = 0; i < n; ++i) xr[i] = store(load(xr[i]) + load(dr[i]));
        }
        const float sum = aten_row_sum(n, [&](int64_t i) {
            const float v = load(xr[i]);
            return v * v;
        });
        const float var = sum / static_cast<float>(n);
        const float inv = 1.0f / std::sqrt(var + eps);
        T* yr = y + t * n;
        for (int64_t i = 0; i < n; ++i) yr[i] = store(load(w[i]) * round(load(xr[i]) * inv));
    }
}

float same(float v) { return v; }

}  // namespace

void rms_norm_rows(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) {
    // x is only read when no residual is added.
    rms_norm_impl(const_cast<float*>(x), static_cast<const float*>(nullptr), rows, n, w, eps, y,
                  same, same, same);
}

void rms_norm_rows_bf16(const uint16_t* x, int64_t rows, int64_t n, const uint16_t* w, float eps,
                        uint16_t* y) {
    rms_norm_impl(const_cast<uint16_t*>(x), static_cast<const uint16_t*>(nullptr), rows, n, w, eps,
                  y, bf16_bits_to_float, round_to_bf16, float_to_bf16_bits);
}

void add_rms_norm_rows(float* x, const float* d, int64_t rows, int64_t n, const float* w, float eps,
                       float* y) {
    rms_norm_impl(x, d, rows, n, w, eps, y, same, same, same);
}

void add_rms_norm_rows_bf16(uint16_t* x, const uint16_t* d, int64_t rows, int64_t n,
                            const uint16_t* w, float eps, uint16_t* y) {
    rms_norm_impl(x, d, rows, n, w, eps, y, bf16_bits_to_float, round_to_bf16, float_to_bf16_bits);
}

}  // namespace pylookahead
