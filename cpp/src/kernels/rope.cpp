#include "kernels/rope.h"

#include <cmath>
#include <cstring>

namespace pylookahead {

void rope_rows(const float* x, int64_t rows, int64_t heads, int64_t d, int64_t row_stride,
               const float* cos, const float* sin, float* y) {
    const int64_t half = d / 2;
    for (int64_t t = 0; t < rows; ++t) {
        const float* c = cos + t * d;
        const float* s = sin + t * d;
        for (int64_t h = 0; h < heads; ++h) {
            const float* xh = x + t * row_stride + h * d;
            float* yh = y + (t * heads + h) * d;
            for (int64_t i = 0; i < half; ++i) {
                const float a = xh[i] * c[i], b = -xh[i + half] * s[i];
                yh[i] = a + b;
            }
            for (int64_t i = half; i < d; ++i) {
                const float a = xh[i] * c[i], b = xh[i - half] * s[i];
                yh[i] = a + b;
            }
        }
    }
}

float bf16_bits_to_float(uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t float_to_bf16_bits(float f) {
    if (std::isnan(f)) return 0x7fc0;
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void rope_rows_bf16(const uint16_t* x, int64_t rows, int64_t heads, int64_t d, int64_t row_stride,
                    const uint16_t* cos, const uint16_t* sin, uint16_t* y) {
    const int64_t half = d / 2;
    auto f = bf16_bits_to_float;
    auto r = [](float v) { return bf16_bits_to_float(float_to_bf16_bits(v)); };
    for (int64_t t = 0; t < rows; ++t) {
        const uint16_t* c = cos + t * d;
        const uint16_t* s = sin + t * d;
        for (int64_t h = 0; h < heads; ++h) {
            const uint16_t* xh = x + t * row_stride + h * d;
            uint16_t* yh = y + (t * heads + h) * d;
            for (int64_t i = 0; i < d; ++i) {
                const float rot = i < half ? -f(xh[i + half]) : f(xh[i - half]);
                const float a = r(f(xh[i]) * f(c[i])), b = r(rot * f(s[i]));
                yh[i] = float_to_bf16_bits(a + b);
            }
        }
    }
}

}  // namespace pylookahead
