// kernels/int8_dot_linear.h: every kind of instructions (vnni, avxvnni, avx2, generic, as this CPU
// has them) computes each output element as the contract states (bitwise, against a scalar model),
// so a row's bits depend neither on the row count, the tile, the column split nor the path; the activations are quantized by the stated rule; and the
// results are close to float64 references.
#include "kernels/int8_dot_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/fma_linear.h"
#include "kernels/quant_format.h"

namespace pylookahead {
namespace {

constexpr WeightFormat kF = WeightFormat::kQ8A8;

std::vector<CpuIsa> paths_here() {
    std::vector<CpuIsa> paths = {CpuIsa::kGeneric};
    for (CpuIsa path : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        if (fma_linear_path(cpu_isa()) >= path) paths.push_back(path);
    }
    return paths;
}

// W [n, k] quantized, with some all-zero groups and, as GGUF Q8_0 blocks may hold, -128 values.
std::vector<unsigned char> make_weights(int64_t n, int64_t k, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> w(n * k);
    for (int64_t c = 0; c < n; ++c) {
        for (int64_t g = 0; g < k / kQuantGroup; ++g) {
            const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 12) - 10);
            const bool zero = rng() % 16 == 0;
            for (int64_t i = 0; i < kQuantGroup; ++i)
                w[c * k + g * kQuantGroup + i] = zero ? 0.0f : u(rng) * scale;
        }
    }
    std::vector<unsigned char> packed(quant_packed_bytes(kF, n, k));
    quant_pack(kF, w.data(), n, k, packed.data());
    // Column 3, group 0: the extremes of int8 against every sign of activation.
    int8_t q[kQuantGroup];
    for (int i = 0; i < kQuantGroup; ++i) q[i] = static_cast<int8_t>(i % 2 == 0 ? -128 : 127);
    quant_set_group(kF, packed.data(), n, k, 3, 0, fp16_from_float(0.01f), 0, q);
    return packed;
}

// Activations with a spread of magnitudes per group, an all-zero group and exact halves.
std::vector<float> make_x(int64_t rows, int64_t k, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> x(rows * k);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g < k / kQuantGroup; ++g) {
            const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 8) - 4);
            for (int64_t i = 0; i < kQuantGroup; ++i)
                x[r * k + g * kQuantGroup + i] = (r + g) % 7 == 3 ? 0.0f : u(rng) * scale;
        }
    }
    return x;
}

// The contract, one element at a time.
float model_element(const float* x, const unsigned char* packed, int64_t n, int64_t k, int64_t c,
                    const float* bias) {
    const int64_t groups = k / kQuantGroup;
    std::vector<int8_t> a(k);
    std::vector<float> da(groups);
    std::vector<int32_t> qsum(groups);
    int8_dot_quantize_row(x, k, a.data(), da.data(), qsum.data());
    float acc = 0.0f;
    int8_t q[kQuantGroup];
    uint16_t d, m;
    for (int64_t g = 0; g < groups; ++g) {
        quant_get_group(kF, packed, n, k, c, g, q, &d, &m);
        int32_t isum = 0;
        for (int64_t i = 0; i < kQuantGroup; ++i) isum += q[i] * a[g * kQuantGroup + i];
        volatile float scale = fp16_to_float(d) * da[g];
        volatile float t = static_cast<float>(isum) * scale;
        acc = acc + t;
    }
    return bias ? acc + *bias : acc;
}

TEST(Int8DotLinear, EveryElementFollowsTheContractOnEveryPathRowCountAndSplit) {
    // n = 69: four full blocks and a partial one (columns 64-68); k = 96: three groups. Rows:
    // every count to 13 (every tile height of both vector paths, and the row tiles past them) and
    // a few around 32 and 40.
    const int64_t n = 69, k = 96, max_rows = 40;
    std::vector<int64_t> row_counts;
    for (int64_t r = 1; r <= 13; ++r) row_counts.push_back(r);
    for (int64_t r : {16, 17, 31, 40}) row_counts.push_back(r);
    const std::vector<unsigned char> packed = make_weights(n, k, 5);
    const std::vector<float> x = make_x(max_rows, k, 9);
    std::vector<float> bias(n);
    for (int64_t c = 0; c < n; ++c) bias[c] = std::sin(0.7 * static_cast<double>(c));
    std::vector<float> want(max_rows * n * 2);
    for (int64_t r = 0; r < max_rows; ++r) {
        for (int64_t c = 0; c < n; ++c) {
            want[(r * n + c) * 2] = model_element(&x[r * k], packed.data(), n, k, c, nullptr);
            want[(r * n + c) * 2 + 1] = model_element(&x[r * k], packed.data(), n, k, c, &bias[c]);
        }
    }
    const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
    for (const std::string& kind : int8_dot_linear_kinds_here()) {
        SCOPED_TRACE(kind);
        for (bool with_bias : {false, true}) {
            for (int64_t rows : row_counts) {
                for (int64_t split = 0; split < blocks; ++split) {
                    std::vector<float> y(rows * n, NAN);
                    const float* bp = with_bias ? bias.data() : nullptr;
                    int8_dot_linear_blocks_as(kind, x.data(), rows, k, k, packed.data(), 0, split,
                                              bp, y.data(), n, n);
                    int8_dot_linear_blocks_as(kind, x.data(), rows, k, k, packed.data(), split,
                                              blocks, bp, y.data(), n, n);
                    for (int64_t r = 0; r < rows; ++r) {
                        for (int64_t c = 0; c < n; ++c) {
                            const float w = want[(r * n + c) * 2 + (with_bias ? 1 : 0)];
                            ASSERT_EQ(std::memcmp(&y[r * n + c], &w, sizeof w), 0)
                                << "rows " << rows << " split " << split << " r " << r << " c " << c
                                << ": " << y[r * n + c] << " vs " << w;
                        }
                    }
                }
            }
        }
    }
}

TEST(Int8DotLinear, EachPathTakesItsKind) {
    const std::vector<std::string> here = int8_dot_linear_kinds_here();
    EXPECT_EQ(here.front(), "generic");
    EXPECT_STREQ(int8_dot_linear_kind(CpuIsa::kGeneric), "generic");
    for (CpuIsa path : paths_here()) {
        const std::string kind = int8_dot_linear_kind(path);
        EXPECT_NE(std::find(here.begin(), here.end(), kind), here.end()) << kind;
        // fma_linear_blocks() sends kQ8A8 to that kind.
        const int64_t n = 16, k = 64;
        const std::vector<unsigned char> packed = make_weights(n, k, 3);
        const std::vector<float> x = make_x(2, k, 4);
        std::vector<float> a(2 * n), b(2 * n);
        fma_linear_blocks(path, kF, x.data(), 2, k, k, packed.data(), 0, 1, nullptr, a.data(), n,
                          n);
        int8_dot_linear_blocks_as(kind, x.data(), 2, k, k, packed.data(), 0, 1, nullptr, b.data(),
                                  n, n);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << kind;
    }
    EXPECT_THROW(int8_dot_linear_blocks_as("sse9", nullptr, 1, 32, 32, nullptr, 0, 1, nullptr,
                                           nullptr, 1, 1),
                 std::exception);
}

TEST(Int8DotLinear, ActivationsAreQuantizedByTheStatedRule) {
    const int64_t k = 64;
    std::vector<float> x(k);
    for (int64_t i = 0; i < k; ++i) x[i] = std::sin(1.3 * static_cast<double>(i)) * 3.0f;
    x[5] = -4.0f;  // the first group's amax: its value quantizes to -127 exactly
    for (int64_t i = 32; i < 64; ++i) x[i] = 0.0f;
    x[40] = std::nanf("");  // NaN quantizes to 0 and does not change the group's scale
    x[41] = 1.25f;          // the group's amax: 127
    std::vector<int8_t> q(k);
    float da[2];
    int32_t qsum[2];
    int8_dot_quantize_row(x.data(), k, q.data(), da, qsum);
    EXPECT_EQ(da[0], 4.0f / 127.0f);
    EXPECT_EQ(q[5], -127);
    EXPECT_EQ(da[1], 1.25f / 127.0f);
    EXPECT_EQ(q[40], 0);
    EXPECT_EQ(q[41], 127);
    for (int g = 0; g < 2; ++g) {
        int32_t sum = 0;
        const float id = 1.0f / da[g];
        for (int64_t i = g * 32; i < g * 32 + 32; ++i) {
            sum += q[i];
            if (std::isnan(x[i])) continue;
            const float t = x[i] * id;
            ASSERT_LE(std::fabs(t - q[i]), 0.5f) << i;
            // Ties go to the even integer.
            if (std::fabs(t - q[i]) == 0.5f) ASSERT_EQ(q[i] % 2, 0) << i;
        }
        EXPECT_EQ(qsum[g], sum);
    }
    // Halves of the scale's step land on even values: x * id = 2.5 -> 2, 3.5 -> 4, -2.5 -> -2.
    std::vector<float> h(32, 0.0f);
    h[0] = 127.0f;  // da = 1, id = 1
    h[1] = 2.5f;
    h[2] = 3.5f;
    h[3] = -2.5f;
    int8_dot_quantize_row(h.data(), 32, q.data(), da, qsum);
    EXPECT_EQ(da[0], 1.0f);
    EXPECT_EQ(q[1], 2);
    EXPECT_EQ(q[2], 4);
    EXPECT_EQ(q[3], -2);
}

TEST(Int8DotLinear, CloseToFloat64References) {
    const int64_t n = 37, k = 320, rows = 3;
    const std::vector<unsigned char> packed = make_weights(n, k, 13);
    std::vector<float> wq(n * k);
    quant_unpack(kF, packed.data(), n, k, wq.data());
    const std::vector<float> x = make_x(rows, k, 17);
    for (const std::string& kind : int8_dot_linear_kinds_here()) {
        std::vector<float> y(rows * n);
        int8_dot_linear_blocks_as(kind, x.data(), rows, k, k, packed.data(), 0,
                                  (n + kQuantBlock - 1) / kQuantBlock, nullptr, y.data(), n, n);
        for (int64_t r = 0; r < rows; ++r) {
            std::vector<int8_t> a(k);
            std::vector<float> da(k / kQuantGroup);
            std::vector<int32_t> qsum(k / kQuantGroup);
            int8_dot_quantize_row(&x[r * k], k, a.data(), da.data(), qsum.data());
            for (int64_t c = 0; c < n; ++c) {
                // (1) Against the dequantized weights times the dequantized activations: only the
                // float epilogue rounds (one product and one sum per group, fp32).
                double ref = 0, mag = 0, exact = 0, act_err = 0;
                for (int64_t i = 0; i < k; ++i) {
                    const double w = wq[c * k + i];
                    const double av = static_cast<double>(a[i]) * da[i / kQuantGroup];
                    ref += w * av;
                    mag += std::fabs(w * av);
                    exact += w * x[r * k + i];
                    act_err += std::fabs(w) * da[i / kQuantGroup] * 0.5;
                }
                const double groups = static_cast<double>(k / kQuantGroup);
                EXPECT_NEAR(y[r * n + c], ref, 3 * groups * 6e-8 * mag + 1e-30)
                    << kind << " r " << r << " c " << c;
                // (2) Against the dequantized weights times x itself: the activations' rounding,
                // at most half a step per input.
                EXPECT_NEAR(y[r * n + c], exact, act_err * (1 + 1e-3) + 3 * groups * 6e-8 * mag)
                    << kind << " r " << r << " c " << c;
            }
        }
    }
}

TEST(Int8DotLinear, LayoutKeepsFourInputsPerLane) {
    const int64_t n = 20, k = 64;
    std::vector<unsigned char> packed(quant_packed_bytes(kF, n, k), 0);
    int8_t q[kQuantGroup], back[kQuantGroup];
    for (int i = 0; i < kQuantGroup; ++i) q[i] = static_cast<int8_t>(i - 16);
    quant_set_group(kF, packed.data(), n, k, 17, 1, fp16_from_float(0.25f), 0, q);
    // Column 17 is lane 1 of block 1; group 1 is its second record; input 4 j + t at byte
    // 32 + j * 64 + lane * 4 + t of the record.
    const unsigned char* rec = packed.data() + (1 * 2 + 1) * 544;
    for (int i = 0; i < kQuantGroup; ++i)
        EXPECT_EQ(static_cast<int8_t>(rec[32 + (i / 4) * 64 + 1 * 4 + i % 4]), q[i]) << i;
    uint16_t d, m;
    quant_get_group(kF, packed.data(), n, k, 17, 1, back, &d, &m);
    EXPECT_EQ(std::memcmp(q, back, sizeof q), 0);
    EXPECT_EQ(fp16_to_float(d), 0.25f);
}

}  // namespace
}  // namespace pylookahead
