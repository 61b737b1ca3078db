#include "kernels/rope.h"

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

}  // namespace pylookahead
