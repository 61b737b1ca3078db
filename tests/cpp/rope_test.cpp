// kernels/rope.h: rotary embedding bitwise equal to the unfused expression it states.
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace pylookahead {
namespace {

std::vector<float> random_values(int64_t count, unsigned seed, float scale) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(count);
    for (float& f : v) f = u(rng);
    return v;
}

TEST(RopeRows, EqualsTheUnfusedExpressionBitwise) {
    const int64_t rows = 3, heads = 5, d = 64,
                  stride = heads * d + 40;  // strided rows (a q of qkv)
    const std::vector<float> x = random_values(rows * stride, 3, 4.0f);
    const std::vector<float> cos = random_values(rows * d, 4, 1.0f);
    const std::vector<float> sin = random_values(rows * d, 5, 1.0f);
    std::vector<float> y(rows * heads * d);
    rope_rows(x.data(), rows, heads, d, stride, cos.data(), sin.data(), y.data());
    for (int64_t t = 0; t < rows; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
            for (int64_t i = 0; i < d; ++i) {
                const float* xh = &x[t * stride + h * d];
                const float rot = i < d / 2 ? -xh[i + d / 2] : xh[i - d / 2];
                volatile float a = xh[i] * cos[t * d + i];  // each product rounded on its own
                volatile float b = rot * sin[t * d + i];
                const float want = a + b;
                const float got = y[(t * heads + h) * d + i];
                ASSERT_EQ(std::memcmp(&got, &want, sizeof want), 0) << t << " " << h << " " << i;
            }
        }
    }
}

}  // namespace
}  // namespace pylookahead
