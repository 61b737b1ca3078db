// kernels/rms_norm.h: ATen's float sum order (golden bits of ATen 2.13, re-derived from the
// installed torch by tests/python/test_rms_norm_rule.py), the norm's bits, row-invariance and the
// fused residual add.
#include "kernels/rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace pylookahead {
namespace {

// The inputs both this test and the pytest build: ((i * 7919 + salt) % 2001 - 1000) / 1000 in
// fp32, and weights 1 + (i % 7) / 8.
std::vector<float> golden_inputs(int64_t count, int64_t salt) {
    std::vector<float> v(count);
    for (int64_t i = 0; i < count; ++i)
        v[i] = static_cast<float>((i * 7919 + salt) % 2001 - 1000) / 1000.0f;
    return v;
}

std::vector<float> golden_weights(int64_t n) {
    std::vector<float> w(n);
    for (int64_t i = 0; i < n; ++i) w[i] = 1.0f + static_cast<float>(i % 7) / 8.0f;
    return w;
}

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

// FNV-1a over the values' bit patterns (uint32 for fp32, uint16 for bf16), as the pytest hashes.
template <typename T>
uint64_t fnv1a(const std::vector<T>& values) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (T v : values) {
        uint64_t b;
        if constexpr (sizeof(T) == 4) {
            b = bits(v);
        } else {
            b = v;
        }
        h = (h ^ b) * 0x100000001b3ull;
    }
    return h;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
    std::vector<uint16_t> out;
    for (float f : v) out.push_back(float_to_bf16_bits(f));
    return out;
}

TEST(AtenRowSum, SumOfSquaresHasAtenBits) {
    const std::pair<int64_t, uint32_t> golden[] = {{5, 0x406179b7},    {37, 0x4144a78b},
                                                   {576, 0x4340f59b},  {896, 0x4395eddc},
                                                   {4096, 0x44aad3e6}, {20000, 0x45d089e8}};
    for (const auto& [n, want] : golden) {
        const std::vector<float> x = golden_inputs(n, 0);
        const float got = aten_row_sum(n, [&](int64_t i) { return x[i] * x[i]; });
        EXPECT_EQ(bits(got), want) << "n " << n;
    }
}

TEST(AtenRowSum, CallsTheTermOncePerIndex) {
    for (int64_t n : {0, 1, 7, 8, 9, 33, 511, 512, 513, 4096, 70001}) {
        std::vector<int> calls(n, 0);
        aten_row_sum(n, [&](int64_t i) { return static_cast<float>(++calls[i]); });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(calls[i], 1) << "n " << n << " index " << i;
    }
}

TEST(RmsNormRows, Fp32AndBf16HaveTheAtenExpressionsBits) {
    const float eps = 1e-5f;
    const struct {
        int64_t n;
        uint64_t fp32, bf16;
    } golden[] = {{37, 0xdc5bdf173a0e6dd6ull, 0xd69734c386cc4d0cull},
                  {576, 0x2462155dacecdac8ull, 0x9909a3082295e32dull}};
    for (const auto& g : golden) {
        const int64_t rows = 3;
        const std::vector<float> x = golden_inputs(rows * g.n, 11), w = golden_weights(g.n);
        std::vector<float> y(x.size());
        rms_norm_rows(x.data(), rows, g.n, w.data(), eps, y.data());
        EXPECT_EQ(fnv1a(y), g.fp32) << "fp32, n " << g.n;
        const std::vector<uint16_t> xb = to_bf16(x), wb = to_bf16(w);
        std::vector<uint16_t> yb(xb.size());
        rms_norm_rows_bf16(xb.data(), rows, g.n, wb.data(), eps, yb.data());
        EXPECT_EQ(fnv1a(yb), g.bf16) << "bf16, n " << g.n;
    }
}

// The contract of rms_norm.h one element at a time (the kernel takes 8 at a time): with d,
// x += d (stored); sum of squares in ATen's order; y = w * round(x * (1 / sqrt(sum / n + eps))).
template <typename T, typename Load, typename Round, typename Store>
std::vector<T> scalar_rule(std::vector<T> x, const std::vector<T>* d, const std::vector<T>& w,
                           int64_t rows, int64_t n, float eps, Load load, Round round,
                           Store store) {
    std::vector<T> y(x.size());
    for (int64_t t = 0; t < rows; ++t) {
        T* xr = x.data() + t * n;
        if (d != nullptr) {
            for (int64_t i = 0; i < n; ++i) xr[i] = store(load(xr[i]) + load((*d)[t * n + i]));
        }
        const float sum = aten_row_sum(n, [&](int64_t i) { return load(xr[i]) * load(xr[i]); });
        const float inv = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
        for (int64_t i = 0; i < n; ++i) y[t * n + i] = store(load(w[i]) * round(load(xr[i]) * inv));
    }
    return y;
}

TEST(RmsNormRows, EightLanesAtATimeKeepTheScalarRuleAtEverySize) {
    auto same = [](float v) { return v; };
    const std::vector<float>* no_residual = nullptr;
    const std::vector<uint16_t>* no_residual_bf16 = nullptr;
    for (int64_t n = 1; n <= 1100; n += n < 80 ? 1 : 97) {
        const int64_t rows = 2;
        std::vector<float> x = golden_inputs(rows * n, n), d = golden_inputs(rows * n, 7 * n);
        const std::vector<float> w = golden_weights(n);
        if (n == 45) x[50] = std::nanf("");  // a NaN row: every output NaN (bf16: 0x7fc0)
        std::vector<float> y(x.size()), xs = x;
        rms_norm_rows(x.data(), rows, n, w.data(), 1e-5f, y.data());
        ASSERT_EQ(fnv1a(y), fnv1a(scalar_rule(x, no_residual, w, rows, n, 1e-5f, same, same, same)))
            << "fp32, n " << n;
        add_rms_norm_rows(xs.data(), d.data(), rows, n, w.data(), 1e-5f, y.data());
        ASSERT_EQ(fnv1a(y), fnv1a(scalar_rule(x, &d, w, rows, n, 1e-5f, same, same, same)))
            << "fp32 with residual, n " << n;
        const std::vector<uint16_t> xb = to_bf16(x), db = to_bf16(d), wb = to_bf16(w);
        std::vector<uint16_t> yb(xb.size()), xbs = xb;
        rms_norm_rows_bf16(xb.data(), rows, n, wb.data(), 1e-5f, yb.data());
        ASSERT_EQ(yb, scalar_rule(xb, no_residual_bf16, wb, rows, n, 1e-5f, bf16_bits_to_float,
                                  round_to_bf16, float_to_bf16_bits))
            << "bf16, n " << n;
        add_rms_norm_rows_bf16(xbs.data(), db.data(), rows, n, wb.data(), 1e-5f, yb.data());
        ASSERT_EQ(yb, scalar_rule(xb, &db, wb, rows, n, 1e-5f, bf16_bits_to_float, round_to_bf16,
                                  float_to_bf16_bits))
            << "bf16 with residual, n " << n;
    }
}

TEST(RmsNormRows, EachRowDependsOnItselfOnly) {
    const int64_t rows = 9, n = 576;
    const std::vector<float> x = golden_inputs(rows * n, 3), w = golden_weights(n);
    std::vector<float> all(x.size()), one(n);
    rms_norm_rows(x.data(), rows, n, w.data(), 1e-6f, all.data());
    for (int64_t t = 0; t < rows; ++t) {
        rms_norm_rows(x.data() + t * n, 1, n, w.data(), 1e-6f, one.data());
        ASSERT_EQ(std::memcmp(one.data(), all.data() + t * n, n * sizeof(float)), 0) << t;
    }
}

TEST(RmsNormRows, InPlaceEqualsOutOfPlace) {
    const int64_t rows = 2, n = 100;
    std::vector<float> x = golden_inputs(rows * n, 5);
    const std::vector<float> w = golden_weights(n);
    std::vector<float> y(x.size());
    rms_norm_rows(x.data(), rows, n, w.data(), 1e-5f, y.data());
    rms_norm_rows(x.data(), rows, n, w.data(), 1e-5f, x.data());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
}

TEST(AddRmsNormRows, EqualsTheAddThenTheNorm) {
    const int64_t rows = 4, n = 576;
    const std::vector<float> x0 = golden_inputs(rows * n, 1), d = golden_inputs(rows * n, 2),
                             w = golden_weights(n);
    // fp32: x + d, then the norm
    std::vector<float> sum(x0.size()), want(x0.size()), x = x0, got(x0.size());
    for (size_t i = 0; i < x0.size(); ++i) sum[i] = x0[i] + d[i];
    rms_norm_rows(sum.data(), rows, n, w.data(), 1e-5f, want.data());
    add_rms_norm_rows(x.data(), d.data(), rows, n, w.data(), 1e-5f, got.data());
    EXPECT_EQ(std::memcmp(x.data(), sum.data(), x.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    // bf16: the sum rounded to bf16 (ATen's bf16 add), then the norm
    const std::vector<uint16_t> xb0 = to_bf16(x0), db = to_bf16(d), wb = to_bf16(w);
    std::vector<uint16_t> sumb(xb0.size()), wantb(xb0.size()), xb = xb0, gotb(xb0.size());
    for (size_t i = 0; i < xb0.size(); ++i)
        sumb[i] = float_to_bf16_bits(bf16_bits_to_float(xb0[i]) + bf16_bits_to_float(db[i]));
    rms_norm_rows_bf16(sumb.data(), rows, n, wb.data(), 1e-5f, wantb.data());
    add_rms_norm_rows_bf16(xb.data(), db.data(), rows, n, wb.data(), 1e-5f, gotb.data());
    EXPECT_EQ(xb, sumb);
    EXPECT_EQ(gotb, wantb);
}

TEST(RmsNormRows, IsCloseToTheExactNorm) {
    const int64_t n = 896;
    const std::vector<float> x = golden_inputs(n, 9), w = golden_weights(n);
    std::vector<float> y(n);
    rms_norm_rows(x.data(), 1, n, w.data(), 1e-5f, y.data());
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) {
        const double want = w[i] * (x[i] * inv);
        ASSERT_NEAR(y[i], want, 4e-7 * std::fabs(want) + 1e-30) << i;
    }
}

}  // namespace
}  // namespace pylookahead
