// kernels/fma_linear.h: each path computes every output element as its contract states (bitwise,
// against a scalar model of the sequence), so a row's bits do not depend on the row count, the
// tile or the column split; and the results are close to a float64 reference.
#include "kernels/fma_linear.h"
#include "kernels/quant_format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace pylookahead {
namespace {

struct Problem {
    int64_t n, k;
    std::vector<float> w;       // [n, k] as fp32 (the values the packed format holds exactly)
    std::vector<uint16_t> w16;  // [n, k] bf16 or fp16 bits (unused for fp32)
    std::vector<float> bias;    // [n]
};

uint16_t bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return static_cast<uint16_t>(u >> 16);  // truncation: the fp32 value below is that bf16
}

float from_bf16(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// A normal fp16 number with exponent e in [-6, 1] and mantissa bits m: bits and exact value.
uint16_t fp16_bits(bool neg, int e, uint32_t m) {
    return static_cast<uint16_t>((neg ? 0x8000u : 0u) | (static_cast<uint32_t>(e + 15) << 10) | m);
}
float from_fp16(uint16_t h) {
    const int e = ((h >> 10) & 31) - 15;
    const float v = std::ldexp(1.0f + static_cast<float>(h & 1023) / 1024.0f, e);
    return (h & 0x8000) ? -v : v;
}

Problem make_problem(WeightFormat format, int64_t n, int64_t k, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Problem p{n, k, std::vector<float>(n * k), std::vector<uint16_t>(n * k), std::vector<float>(n)};
    for (int64_t i = 0; i < n * k; ++i) {
        if (format == WeightFormat::kF32) {
            p.w[i] = u(rng);
        } else if (format == WeightFormat::kBF16) {
            p.w16[i] = bf16_bits(u(rng));
            p.w[i] = from_bf16(p.w16[i]);
        } else {
            p.w16[i] = fp16_bits(rng() & 1, static_cast<int>(rng() % 8) - 6, rng() & 1023);
            p.w[i] = from_fp16(p.w16[i]);
        }
    }
    for (float& b : p.bias) b = u(rng);
    return p;
}

// [ceil(n/8), k, 8] in the format the path reads (fp16 as fp32 where it cannot read fp16).
std::vector<unsigned char> pack(const Problem& p, WeightFormat format, CpuIsa path) {
    const bool as_f32 = format == WeightFormat::kF32 || !fma_linear_reads(path, format);
    const int64_t bytes = as_f32 ? 4 : 2;
    const int64_t blocks = (p.n + kFmaLinearBlock - 1) / kFmaLinearBlock;
    std::vector<unsigned char> out(blocks * p.k * kFmaLinearBlock * bytes, 0);
    for (int64_t r = 0; r < p.n; ++r) {
        for (int64_t i = 0; i < p.k; ++i) {
            const int64_t at =
                ((r / kFmaLinearBlock) * p.k + i) * kFmaLinearBlock + r % kFmaLinearBlock;
            if (as_f32) {
                std::memcpy(out.data() + at * 4, &p.w[r * p.k + i], 4);
            } else {
                std::memcpy(out.data() + at * 2, &p.w16[r * p.k + i], 2);
            }
        }
    }
    return out;
}

// The contract's sequence, one element at a time.
float model_element(CpuIsa path, const float* x, const float* w, int64_t k, const float* bias) {
    float acc = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
        if (path != CpuIsa::kGeneric) {
            acc = std::fma(x[i], w[i], acc);
        } else {
            volatile float prod = x[i] * w[i];  // rounded on its own: no fusion
            acc = acc + prod;
        }
    }
    return bias ? acc + *bias : acc;
}

// Every path this CPU can run (under any PYLOOKAHEAD_CPU_ISA cap).
std::vector<CpuIsa> paths_here() {
    std::vector<CpuIsa> paths = {CpuIsa::kGeneric};
    for (CpuIsa path : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        if (fma_linear_path(cpu_isa()) >= path) paths.push_back(path);
    }
    return paths;
}

WeightFormat stored(WeightFormat format, CpuIsa path) {
    return fma_linear_reads(path, format) ? format : WeightFormat::kF32;
}

class FmaLinear : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(FmaLinear, EveryElementFollowsTheContractAtEveryRowCountAndSplit) {
    const WeightFormat format = GetParam();
    // n = 45: five full blocks and a partial one; k = 67: odd, and not a multiple of a cache line.
    // Rows up to 26: one pass of up to 12 rows, then two and three even passes.
    const int64_t n = 45, k = 67, max_rows = 26;
    const Problem p = make_problem(format, n, k, 7);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> x(max_rows * k);
    for (float& v : x) v = u(rng);
    const int64_t blocks = (n + kFmaLinearBlock - 1) / kFmaLinearBlock;
    for (CpuIsa path : paths_here()) {
        const std::vector<unsigned char> packed = pack(p, format, path);
        for (bool with_bias : {false, true}) {
            const float* bias = with_bias ? p.bias.data() : nullptr;
            for (int64_t rows = 1; rows <= max_rows; ++rows) {
                // The whole range at once, and split at every block boundary into two calls.
                for (int64_t split = 0; split < blocks; ++split) {
                    std::vector<float> y(rows * n, NAN);
                    fma_linear_blocks(path, stored(format, path), x.data(), rows, k, k,
                                      packed.data(), 0, split, bias, y.data(), n, n);
                    fma_linear_blocks(path, stored(format, path), x.data(), rows, k, k,
                                      packed.data(), split, blocks, bias, y.data(), n, n);
                    for (int64_t r = 0; r < rows; ++r) {
                        for (int64_t c = 0; c < n; ++c) {
                            const float want = model_element(path, &x[r * k], &p.w[c * k], k,
                                                             with_bias ? &p.bias[c] : nullptr);
                            ASSERT_EQ(std::memcmp(&y[r * n + c], &want, sizeof want), 0)
                                << cpu_isa_name(path) << " rows " << rows << " split " << split
                                << " r " << r << " c " << c << ": " << y[r * n + c] << " vs "
                                << want;
                        }
                    }
                }
            }
        }
    }
}

TEST_P(FmaLinear, CloseToFloat64) {
    const WeightFormat format = GetParam();
    const int64_t n = 19, k = 300, rows = 3;
    const Problem p = make_problem(format, n, k, 11);
    std::vector<float> x(rows * k);
    for (int64_t i = 0; i < rows * k; ++i) x[i] = std::sin(0.37 * static_cast<double>(i));
    for (CpuIsa path : paths_here()) {
        const std::vector<unsigned char> packed = pack(p, format, path);
        std::vector<float> y(rows * n);
        fma_linear_blocks(path, stored(format, path), x.data(), rows, k, k, packed.data(), 0,
                          (n + kFmaLinearBlock - 1) / kFmaLinearBlock, p.bias.data(), y.data(), n,
                          n);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < n; ++c) {
                double ref = p.bias[c], mag = std::fabs(p.bias[c]);
                for (int64_t i = 0; i < k; ++i) {
                    ref += static_cast<double>(x[r * k + i]) * p.w[c * k + i];
                    mag += std::fabs(static_cast<double>(x[r * k + i]) * p.w[c * k + i]);
                }
                // fp32 accumulation over k terms: |error| <= k * eps * sum |terms| (loose bound).
                EXPECT_NEAR(y[r * n + c], ref, k * 6e-8 * mag) << cpu_isa_name(path);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Formats, FmaLinear,
                         ::testing::Values(WeightFormat::kF32, WeightFormat::kBF16,
                                           WeightFormat::kF16),
                         [](const auto& info) {
                             switch (info.param) {
                                 case WeightFormat::kF32: return "F32";
                                 case WeightFormat::kBF16: return "BF16";
                                 default: return "F16";
                             }
                         });

TEST(CpuIsa, NamesAndShortfall) {
    EXPECT_STREQ(cpu_isa_name(CpuIsa::kAvx2), "avx2");
    EXPECT_EQ(cpu_isa_shortfall(CpuIsa::kGeneric), "");
    EXPECT_LE(cpu_isa(), detected_cpu_isa());
    if (cpu_isa() < CpuIsa::kAvx512Bf16) {
        EXPECT_FALSE(cpu_isa_shortfall(CpuIsa::kAvx512Bf16).empty());
    }
}

}  // namespace
}  // namespace pylookahead

// ---- quantized formats (kernels/quant_format.h) -----------------------------------------------
namespace pylookahead {
namespace {

// W [n, k] with a spread of magnitudes per group (some groups all zero, one constant), quantized.
std::vector<unsigned char> quantized_problem(WeightFormat format, int64_t n, int64_t k,
                                             unsigned seed, std::vector<float>* w_out) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> w(n * k);
    for (int64_t c = 0; c < n; ++c) {
        for (int64_t g = 0; g < k / kQuantGroup; ++g) {
            const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 12) - 10);
            const int kind = static_cast<int>(rng() % 16);
            for (int64_t i = 0; i < kQuantGroup; ++i) {
                float v = u(rng) * scale;
                if (kind == 0) v = 0.0f;   // an all-zero group: d = 0
                if (kind == 1) v = scale;  // a constant group: kQ4 d = 0
                w[c * k + g * kQuantGroup + i] = v;
            }
        }
    }
    std::vector<unsigned char> packed(quant_packed_bytes(format, n, k));
    quant_pack(format, w.data(), n, k, packed.data());
    if (w_out) *w_out = w;
    return packed;
}

// The contract's sequence for a quantized format (fma_linear.h), one element at a time.
float model_quant_element(CpuIsa path, WeightFormat format, const float* x,
                          const unsigned char* packed, int64_t n, int64_t k, int64_t c,
                          const float* bias) {
    auto madd = [&](float acc, float a, float b) {
        if (path != CpuIsa::kGeneric) return std::fma(a, b, acc);
        volatile float prod = a * b;
        return acc + prod;
    };
    float acc = 0.0f;
    if (format == WeightFormat::kQ8C) {
        // One chain over k, then the column's scale, then the bias (each rounded).
        std::vector<int8_t> qc(k);
        float dc;
        quant_get_channel(packed, n, k, c, qc.data(), &dc);
        for (int64_t i = 0; i < k; ++i) acc = madd(acc, x[i], static_cast<float>(qc[i]));
        volatile float scaled = acc * dc;
        return bias ? scaled + *bias : scaled;
    }
    int8_t q[kQuantGroup];
    uint16_t d, m;
    for (int64_t g = 0; g < k / kQuantGroup; ++g) {
        quant_get_group(format, packed, n, k, c, g, q, &d, &m);
        float s = 0.0f, xsum = 0.0f;
        for (int64_t t = 0; t < kQuantGroup; ++t) {
            // kQ8: inputs ascending; kQ4: j, j + 16 for j = 0..15 (the nibbles of a byte).
            const int64_t i = format == WeightFormat::kQ8 ? t : (t % 2 == 0 ? t / 2 : t / 2 + 16);
            s = madd(s, x[g * kQuantGroup + i], static_cast<float>(q[i]));
        }
        for (int64_t i = 0; i < kQuantGroup; ++i) xsum += x[g * kQuantGroup + i];
        acc = madd(acc, s, fp16_to_float(d));
        if (format == WeightFormat::kQ4) acc = madd(acc, xsum, fp16_to_float(m));
    }
    return bias ? acc + *bias : acc;
}

class QuantLinear : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(QuantLinear, EveryElementFollowsTheContractAtEveryRowCountAndSplit) {
    const WeightFormat format = GetParam();
    // n = 69: four full blocks and a partial one (columns 64-68; its second 8 lanes are padding);
    // k = 96: three groups. Rows: every count up to 13 (both code paths, every tile shape) and
    // around the 32 rows kept in memory at a time.
    const int64_t n = 69, k = 96, max_rows = 40;
    std::vector<int64_t> row_counts;
    for (int64_t r = 1; r <= 13; ++r) row_counts.push_back(r);
    for (int64_t r : {31, 32, 33, 40}) row_counts.push_back(r);
    const std::vector<unsigned char> packed = quantized_problem(format, n, k, 5, nullptr);
    std::vector<float> wq(n * k);
    quant_unpack(format, packed.data(), n, k, wq.data());
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> x(max_rows * k), bias(n);
    for (float& v : x) v = u(rng);
    for (float& v : bias) v = u(rng);
    const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
    for (CpuIsa path : paths_here()) {
        for (bool with_bias : {false, true}) {
            for (int64_t rows : row_counts) {
                for (int64_t split = 0; split < blocks; ++split) {
                    std::vector<float> y(rows * n, NAN);
                    const float* bp = with_bias ? bias.data() : nullptr;
                    fma_linear_blocks(path, format, x.data(), rows, k, k, packed.data(), 0, split,
                                      bp, y.data(), n, n);
                    fma_linear_blocks(path, format, x.data(), rows, k, k, packed.data(), split,
                                      blocks, bp, y.data(), n, n);
                    for (int64_t r = 0; r < rows; ++r) {
                        for (int64_t c = 0; c < n; ++c) {
                            const float want =
                                model_quant_element(path, format, &x[r * k], packed.data(), n, k, c,
                                                    with_bias ? &bias[c] : nullptr);
                            ASSERT_EQ(std::memcmp(&y[r * n + c], &want, sizeof want), 0)
                                << cpu_isa_name(path) << " rows " << rows << " split " << split
                                << " r " << r << " c " << c << ": " << y[r * n + c] << " vs "
                                << want;
                        }
                    }
                }
            }
        }
    }
}

TEST_P(QuantLinear, EveryRowCountUpTo64GivesTheSameBits) {
    // The row-invariance probe of the engine's load, at every step height 1..64: the first m rows
    // of a 64-row call, bitwise (columns split between two calls, as threads split them).
    const WeightFormat format = GetParam();
    const int64_t n = 53, k = 64, max_rows = 64;
    const std::vector<unsigned char> packed = quantized_problem(format, n, k, 17, nullptr);
    std::vector<float> x(max_rows * k);
    for (int64_t i = 0; i < max_rows * k; ++i) x[i] = std::cos(0.61 * static_cast<double>(i));
    const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
    for (CpuIsa path : paths_here()) {
        std::vector<float> all(max_rows * n);
        fma_linear_blocks(path, format, x.data(), max_rows, k, k, packed.data(), 0, blocks, nullptr,
                          all.data(), n, n);
        for (int64_t rows = 1; rows <= max_rows; ++rows) {
            std::vector<float> y(rows * n, NAN);
            fma_linear_blocks(path, format, x.data(), rows, k, k, packed.data(), 0, 1, nullptr,
                              y.data(), n, n);
            fma_linear_blocks(path, format, x.data(), rows, k, k, packed.data(), 1, blocks, nullptr,
                              y.data(), n, n);
            ASSERT_EQ(std::memcmp(y.data(), all.data(), rows * n * sizeof(float)), 0)
                << cpu_isa_name(path) << " rows " << rows;
        }
    }
}

TEST_P(QuantLinear, CloseToFloat64OfTheDequantizedWeights) {
    const WeightFormat format = GetParam();
    const int64_t n = 19, k = 320, rows = 3;
    const std::vector<unsigned char> packed = quantized_problem(format, n, k, 13, nullptr);
    std::vector<float> wq(n * k);
    quant_unpack(format, packed.data(), n, k, wq.data());
    std::vector<float> x(rows * k);
    for (int64_t i = 0; i < rows * k; ++i) x[i] = std::sin(0.37 * static_cast<double>(i));
    for (CpuIsa path : paths_here()) {
        std::vector<float> y(rows * n);
        fma_linear_blocks(path, format, x.data(), rows, k, k, packed.data(), 0,
                          (n + kQuantBlock - 1) / kQuantBlock, nullptr, y.data(), n, n);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < n; ++c) {
                double ref = 0, mag = 0;
                for (int64_t i = 0; i < k; ++i) {
                    ref += static_cast<double>(x[r * k + i]) * wq[c * k + i];
                    mag += std::fabs(static_cast<double>(x[r * k + i]) * wq[c * k + i]);
                }
                // fp32 accumulation over k terms: |error| <= k * eps * sum |terms| (loose bound).
                EXPECT_NEAR(y[r * n + c], ref, k * 6e-8 * mag) << cpu_isa_name(path);
            }
        }
    }
}

TEST_P(QuantLinear, QuantizationErrorIsWithinTheGroupStep) {
    const WeightFormat format = GetParam();
    const int64_t n = 17, k = 128;
    std::vector<float> w;
    const std::vector<unsigned char> packed = quantized_problem(format, n, k, 21, &w);
    std::vector<float> wq(n * k);
    quant_unpack(format, packed.data(), n, k, wq.data());
    // kQ8C scales a whole column: its "group" is the column.
    const int64_t group = format == WeightFormat::kQ8C ? k : kQuantGroup;
    for (int64_t c = 0; c < n; ++c) {
        for (int64_t g = 0; g < k / group; ++g) {
            const float* v = &w[c * k + g * group];
            const float* vq = &wq[c * k + g * group];
            const auto [lo, hi] = std::minmax_element(v, v + group);
            const float amax = std::max(std::fabs(*lo), std::fabs(*hi));
            // Step: the group's range over the levels; half a step of rounding, plus the fp16
            // rounding of the scale (and of kQ4's offset) carried over the levels (kQ8C: an fp32
            // scale, and q * d rounded to fp32).
            const double step = format == WeightFormat::kQ4 ? (*hi - *lo) / 15.0 : amax / 127.0;
            const double bound = 0.5 * step * (1 + 1e-2) + amax * 2e-3 + 1e-30;
            for (int64_t i = 0; i < group; ++i) {
                ASSERT_LE(std::fabs(static_cast<double>(vq[i]) - v[i]), bound)
                    << "column " << c << " group " << g << " i " << i << ": " << v[i] << " -> "
                    << vq[i];
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantLinear,
                         ::testing::Values(WeightFormat::kQ8, WeightFormat::kQ4,
                                           WeightFormat::kQ8C),
                         [](const auto& info) {
                             return info.param == WeightFormat::kQ8   ? "Q8"
                                    : info.param == WeightFormat::kQ4 ? "Q4"
                                                                      : "Q8C";
                         });

TEST(QuantFormat, Fp16ConversionRoundsToNearestEven) {
    // Every fp16 value converts back exactly; halfway points between neighbours round to even.
    for (uint32_t h = 0; h < 0x7c00; ++h) {
        const float f = fp16_to_float(static_cast<uint16_t>(h));
        ASSERT_EQ(fp16_from_float(f), h) << h;
        ASSERT_EQ(fp16_from_float(-f), h | 0x8000u) << h;
        const float next = fp16_to_float(static_cast<uint16_t>(h + 1));
        const float mid = static_cast<float>((static_cast<double>(f) + next) / 2);
        ASSERT_EQ(fp16_from_float(mid), (h & 1) ? h + 1 : h) << h;
    }
    EXPECT_EQ(fp16_from_float(1e6f), 0x7c00u);
    EXPECT_EQ(fp16_from_float(1e-9f), 0u);
    EXPECT_EQ(fp16_to_float(0x3c00), 1.0f);
    EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
}

TEST(QuantFormat, SetGroupPlacesGgufBlocks) {
    const int64_t n = 9, k = 64;
    std::vector<unsigned char> packed(quant_packed_bytes(WeightFormat::kQ4, n, k), 0);
    int8_t q[kQuantGroup];
    for (int i = 0; i < kQuantGroup; ++i) q[i] = static_cast<int8_t>(i % 16);
    // Column 8 (lane 8 of the first block), group 1: d = 0.5, m = -1.
    quant_set_group(WeightFormat::kQ4, packed.data(), n, k, 8, 1, fp16_from_float(0.5f),
                    fp16_from_float(-1.0f), q);
    std::vector<float> w(n * k);
    quant_unpack(WeightFormat::kQ4, packed.data(), n, k, w.data());
    for (int i = 0; i < kQuantGroup; ++i) {
        EXPECT_EQ(w[8 * k + 32 + i], 0.5f * (i % 16) - 1.0f);
        EXPECT_EQ(w[8 * k + i], 0.0f);
        EXPECT_EQ(w[7 * k + 32 + i], 0.0f);
    }
    EXPECT_THROW(quant_packed_bytes(WeightFormat::kQ8, 4, 48), std::exception);
}

}  // namespace
}  // namespace pylookahead
