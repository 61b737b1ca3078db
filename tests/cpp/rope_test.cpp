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

TEST(RopeRowsBf16, EqualsTheExpressionInBf16ArithmeticBitwise) {
    const int64_t rows = 4, heads = 3, d = 64, stride = heads * d + 2 * 64;
    auto bf16_values = [](int64_t count, unsigned seed, float scale) {
        std::vector<uint16_t> v;
        for (float f : random_values(count, seed, scale)) v.push_back(float_to_bf16_bits(f));
        return v;
    };
    const std::vector<uint16_t> x = bf16_values(rows * stride, 6, 8.0f);
    const std::vector<uint16_t> cos = bf16_values(rows * d, 7, 1.0f);
    const std::vector<uint16_t> sin = bf16_values(rows * d, 8, 1.0f);
    std::vector<uint16_t> y(rows * heads * d);
    rope_rows_bf16(x.data(), rows, heads, d, stride, cos.data(), sin.data(), y.data());
    auto round = round_to_bf16;
    for (int64_t t = 0; t < rows; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
            for (int64_t i = 0; i < d; ++i) {
                const uint16_t* xh = &x[t * stride + h * d];
                const float rot = i < d / 2 ? -bf16_bits_to_float(xh[i + d / 2])
                                            : bf16_bits_to_float(xh[i - d / 2]);
                const float a =
                    round(bf16_bits_to_float(xh[i]) * bf16_bits_to_float(cos[t * d + i]));
                const float b = round(rot * bf16_bits_to_float(sin[t * d + i]));
                ASSERT_EQ(y[(t * heads + h) * d + i], float_to_bf16_bits(a + b))
                    << t << " " << h << " " << i;
            }
        }
    }
}

}  // namespace
}  // namespace pylookahead
