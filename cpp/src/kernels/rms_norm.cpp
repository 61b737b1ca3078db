#include "kernels/rms_norm.h"

#include <cmath>
#include <cstring>

namespace pylookahead {

namespace {

using F8 = RowSumVec;
using U8 = uint32_t __attribute__((vector_size(32)));
using H8 = uint16_t __attribute__((vector_size(16)));

// Element access of the rows, one element or 8 at a time (lane by lane the same operations):
// `load` widens to fp32, `round` keeps of an fp32 intermediate what the element type stores,
// `store` narrows a result.
struct Fp32Rows {
    using T = float;
    static float load(float v) { return v; }
    static float round(float v) { return v; }
    static float store(float v) { return v; }
    static F8 load8(const float* p) {
        F8 v;
        std::memcpy(&v, p, sizeof v);
        return v;
    }
    static F8 round8(F8 v) { return v; }
    static void store8(float* p, F8 v) { std::memcpy(p, &v, sizeof v); }
};

struct Bf16Rows {
    using T = uint16_t;
    static float load(uint16_t v) { return bf16_bits_to_float(v); }
    static float round(float v) { return round_to_bf16(v); }
    static uint16_t store(float v) { return float_to_bf16_bits(v); }
    static F8 load8(const uint16_t* p) {
        H8 h;
        std::memcpy(&h, p, sizeof h);
        const U8 u = __builtin_convertvector(h, U8) << 16;
        F8 f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    }
    // float_to_bf16_bits lane by lane: nearest even, NaN -> 0x7fc0.
    static H8 narrow8(F8 f) {
        U8 u;
        std::memcpy(&u, &f, sizeof u);
        const U8 nan = __builtin_convertvector(f != f, U8);  // all ones in NaN lanes
        const U8 r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        return __builtin_convertvector((r & ~nan) | ((U8{} + 0x7fc0u) & nan), H8);
    }
    static F8 round8(F8 f) {
        const H8 h = narrow8(f);
        return load8(reinterpret_cast<const uint16_t*>(&h));
    }
    static void store8(uint16_t* p, F8 v) {
        const H8 h = narrow8(v);
        std::memcpy(p, &h, sizeof h);
    }
};

// The one row loop of both element types, 8 elements at a time and the rest one by one. With d,
// x[t] += d[t] first (written back to x). y may be x (each element is read before it is written).
template <typename E>
void rms_norm_impl(typename E::T* x, const typename E::T* d, int64_t rows, int64_t n,
                   const typename E::T* w, float eps, typename E::T* y) {
    const int64_t n8 = n - n % 8;
    for (int64_t t = 0; t < rows; ++t) {
        typename E::T* xr = x + t * n;
        if (d != nullptr) {
            const typename E::T* dr = d + t * n;
            for (int64_t i = 0; i < n8; i += 8)
                E::store8(xr + i, E::load8(xr + i) + E::load8(dr + i));
            for (int64_t i = n8; i < n; ++i) xr[i] = E::store(E::load(xr[i]) + E::load(dr[i]));
        }
        const float sum = aten_row_sum(
            n,
            [&](int64_t i) {
                const float v = E::load(xr[i]);
                return v * v;
            },
            [&](int64_t i) {
                const F8 v = E::load8(xr + i);
                return v * v;
            });
        const float var = sum / static_cast<float>(n);
        const float inv = 1.0f / std::sqrt(var + eps);
        typename E::T* yr = y + t * n;
        for (int64_t i = 0; i < n8; i += 8)
            E::store8(yr + i, E::load8(w + i) * E::round8(E::load8(xr + i) * inv));
        for (int64_t i = n8; i < n; ++i)
            yr[i] = E::store(E::load(w[i]) * E::round(E::load(xr[i]) * inv));
    }
}

}  // namespace

void rms_norm_rows(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) {
    // x is only read when no residual is added.
    rms_norm_impl<Fp32Rows>(const_cast<float*>(x), nullptr, rows, n, w, eps, y);
}

void rms_norm_rows_bf16(const uint16_t* x, int64_t rows, int64_t n, const uint16_t* w, float eps,
                        uint16_t* y) {
    rms_norm_impl<Bf16Rows>(const_cast<uint16_t*>(x), nullptr, rows, n, w, eps, y);
}

void add_rms_norm_rows(float* x, const float* d, int64_t rows, int64_t n, const float* w, float eps,
                       float* y) {
    rms_norm_impl<Fp32Rows>(x, d, rows, n, w, eps, y);
}

void add_rms_norm_rows_bf16(uint16_t* x, const uint16_t* d, int64_t rows, int64_t n,
                            const uint16_t* w, float eps, uint16_t* y) {
    rms_norm_impl<Bf16Rows>(x, d, rows, n, w, eps, y);
}

}  // namespace pylookahead
