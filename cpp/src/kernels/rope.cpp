#include "kernels/rope.h"

namespace pylookahead {

namespace {

// The one loop nest of both element types. `load` widens an element to fp32, `round` rounds an
// fp32 intermediate to the element type's precision (returned as fp32), `store` narrows a result.
template <typename T, typename Load, typename Round, typename Store>
void rope_rows_impl(const T* x, int64_t rows, int64_t heads, int64_t d, int64_t row_stride,
                    const T* cos, const T* sin, T* y, Load load, Round round, Store store) {
    const int64_t half = d / 2;
    for (int64_t t = 0; t < rows; ++t) {
        const T* c = cos + t * d;
        const T* s = sin + t * d;
        for (int64_t h = 0; h < heads; ++h) {
            const T* xh = x + t * row_stride + h * d;
            T* yh = y + (t * heads + h) * d;
            for (int64_t i = 0; i < half; ++i) {
                const float a = round(load(xh[i]) * load(c[i]));
                const float b = round(-load(xh[i + half]) * load(s[i]));
                yh[i] = store(a + b);
            }
            for (int64_t i = half; i < d; ++i) {
                const float a = round(load(xh[i]) * load(c[i]));
                const float b = round(load(xh[i - half]) * load(s[i]));
                yh[i] = store(a + b);
            }
        }
    }
}

}  // namespace

void rope_rows(const float* x, int64_t rows, int64_t heads, int64_t d, int64_t row_stride,
               const float* cos, const float* sin, float* y) {
    auto same = [](float v) { return v; };
    rope_rows_impl(x, rows, heads, d, row_stride, cos, sin, y, same, same, same);
}

void rope_rows_bf16(const uint16_t* x, int64_t rows, int64_t heads, int64_t d, int64_t row_stride,
                    const uint16_t* cos, const uint16_t* sin, uint16_t* y) {
    rope_rows_impl(x, rows, heads, d, row_stride, cos, sin, y, bf16_bits_to_float, round_to_bf16,
                   float_to_bf16_bits);
}

}  // namespace pylookahead
