// kernels/argmax_screen.h: the screened argmax equals the argmax of the whole row computed by
// fma_linear_blocks (with and without bf16 rounding of the logits), on weights built to produce
// near-ties and exact ties; the bound holds for every column; undecidable rows return -1.
#include "kernels/argmax_screen.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/quant_format.h"

namespace pylookahead {
namespace {

// W [n, k] as bf16 values (held in fp32): random columns, then a cluster of columns equal to
// column 0 but for one weight moved by a bf16 ulp or two, and some exact copies of column 0.
struct Head {
    int64_t n, k;
    std::vector<float> w;              // [n, k]
    std::vector<unsigned char> exact;  // [ceil(n/8), k, 8] bf16, fma_linear_blocks' layout
    std::vector<unsigned char> q8;     // the screen's copy
    std::vector<float> beta;           // [n]
};

uint16_t bits_of(float f) { return float_to_bf16_bits(f); }

Head make_head(int64_t n, int64_t k, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 0.05f);
    Head h{n, k, std::vector<float>(n * k), {}, {}, std::vector<float>(n)};
    for (float& v : h.w) v = round_to_bf16(g(rng));
    for (int64_t c = 1; c <= 48; ++c) {
        std::copy_n(h.w.begin(), k, h.w.begin() + c * k);
        if (c % 6 == 0) continue;  // an exact copy: a tie broken by the first index
        const int64_t i = static_cast<int64_t>(rng() % k);
        uint16_t b = bits_of(h.w[c * k + i]);
        b = static_cast<uint16_t>(b + static_cast<int>(rng() % 5) - 2);
        h.w[c * k + i] = bf16_bits_to_float(b);
    }
    const int64_t blocks = (n + kFmaLinearBlock - 1) / kFmaLinearBlock;
    h.exact.assign(blocks * k * kFmaLinearBlock * 2, 0);
    for (int64_t c = 0; c < n; ++c) {
        for (int64_t i = 0; i < k; ++i) {
            const uint16_t b = bits_of(h.w[c * k + i]);
            const int64_t at =
                ((c / kFmaLinearBlock) * k + i) * kFmaLinearBlock + c % kFmaLinearBlock;
            std::memcpy(h.exact.data() + at * 2, &b, 2);
        }
    }
    h.q8.assign(quant_packed_bytes(WeightFormat::kQ8, n, k), 0);
    EXPECT_TRUE(argmax_screen_pack(h.w.data(), n, k, h.q8.data(), h.beta.data()));
    return h;
}

// Rows x: half of them point at column 0's direction (so the near-tied cluster holds the top),
// half are random; some inputs are large.
std::vector<float> make_x(const Head& h, std::mt19937& rng, bool aimed) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(h.k);
    for (int64_t i = 0; i < h.k; ++i) {
        x[i] = aimed ? 40.0f * h.w[i] + 0.05f * g(rng) : g(rng);
        if (rng() % 17 == 0) x[i] *= 8.0f;
    }
    return x;
}

int32_t full_argmax(const std::vector<float>& y, bool round_bf16) {
    int32_t best = 0;
    for (size_t c = 1; c < y.size(); ++c) {
        const float v = round_bf16 ? round_to_bf16(y[c]) : y[c];
        const float b = round_bf16 ? round_to_bf16(y[best]) : y[best];
        if (v > b) best = static_cast<int32_t>(c);
    }
    return best;
}

std::vector<CpuIsa> paths() {
    std::vector<CpuIsa> out{CpuIsa::kGeneric};
    if (fma_linear_path(cpu_isa()) != CpuIsa::kGeneric) out.push_back(fma_linear_path(cpu_isa()));
    return out;
}

TEST(ArgmaxScreen, PicksTheArgmaxOfTheWholeRowWithNearTiesAndExactTies) {
    const int64_t n = 1003, k = 96;  // n not a multiple of 8 or 16: tail blocks
    const Head h = make_head(n, k, 7);
    std::mt19937 rng(11);
    for (CpuIsa path : paths()) {
        int64_t screened = 0, aimed_ties = 0;
        for (int trial = 0; trial < 400; ++trial) {
            const std::vector<float> x = make_x(h, rng, trial % 2 == 0);
            std::vector<float> y(n), approx(n), scratch(n);
            fma_linear_blocks(path, WeightFormat::kBF16, x.data(), 1, k, k, h.exact.data(), 0,
                              (n + 7) / 8, nullptr, y.data(), n, n);
            fma_linear_blocks(path, WeightFormat::kQ8, x.data(), 1, k, k, h.q8.data(), 0,
                              (n + 15) / 16, nullptr, approx.data(), n, n);
            double l1 = 0.0;
            for (float v : x) l1 += std::fabs(v);
            for (int64_t c = 0; c < n; ++c) {
                ASSERT_LE(std::fabs(static_cast<double>(y[c]) - approx[c]), l1 * h.beta[c])
                    << "bound broken at column " << c << ", trial " << trial;
            }
            for (bool round_bf16 : {false, true}) {
                int64_t cand = 0;
                const int32_t id = argmax_screen_pick(path, WeightFormat::kBF16, h.exact.data(), n,
                                                      k, x.data(), approx.data(), h.beta.data(),
                                                      round_bf16, n, scratch.data(), &cand);
                ASSERT_EQ(id, full_argmax(y, round_bf16))
                    << "path " << cpu_isa_name(path) << ", trial " << trial << ", bf16 "
                    << round_bf16 << ", candidates " << cand;
                screened += cand < n / 4;
                if (trial % 2 == 0 && cand > 1) ++aimed_ties;
            }
        }
        // The screen must actually narrow the rows (most rows keep a small candidate set), and
        // the aimed rows must exercise several candidates.
        EXPECT_GT(screened, 700) << cpu_isa_name(path);
        EXPECT_GT(aimed_ties, 200) << cpu_isa_name(path);
    }
}

// The pick must hold for any approximation the bound allows, not only the kernel's: here every
// column but the argmax is pushed up to its upper bound and the argmax down to its lower bound,
// the worst case for the candidate test (with bf16 rounding, the winner is often a column whose
// fp32 value is below the fp32 maximum but rounds to the same bf16).
TEST(ArgmaxScreen, PicksTheArgmaxForEveryApproximationWithinTheBound) {
    const int64_t n = 1003, k = 96;
    const Head h = make_head(n, k, 17);
    std::mt19937 rng(19);
    const CpuIsa path = fma_linear_path(cpu_isa());
    int64_t rounded_below_max = 0;
    for (int trial = 0; trial < 300; ++trial) {
        const std::vector<float> x = make_x(h, rng, trial % 3 != 0);
        std::vector<float> y(n), approx(n), scratch(n);
        fma_linear_blocks(path, WeightFormat::kBF16, x.data(), 1, k, k, h.exact.data(), 0,
                          (n + 7) / 8, nullptr, y.data(), n, n);
        double l1 = 0.0;
        for (float v : x) l1 += std::fabs(v);
        for (bool round_bf16 : {false, true}) {
            const int32_t want = full_argmax(y, round_bf16);
            int32_t fp32_max = full_argmax(y, false);
            rounded_below_max += round_bf16 && y[want] < y[fp32_max];
            for (int64_t c = 0; c < n; ++c) {
                const double b = 0.999 * l1 * h.beta[c];
                approx[c] = static_cast<float>(c == want ? y[c] - b : y[c] + b);
            }
            ASSERT_EQ(argmax_screen_pick(path, WeightFormat::kBF16, h.exact.data(), n, k, x.data(),
                                         approx.data(), h.beta.data(), round_bf16, n,
                                         scratch.data(), nullptr),
                      want)
                << "trial " << trial << ", bf16 " << round_bf16;
        }
    }
    EXPECT_GT(rounded_below_max, 20);  // the bf16 widening was needed that often
}

// The bound is worst-case tight enough to matter: a column whose every weight sits 0.49 of a
// step above its int8 value, read by inputs of matching sign, errs by almost e_c |x|_1.
TEST(ArgmaxScreen, BoundHoldsOnAWorstCaseColumn) {
    const int64_t n = 16, k = 64;
    const float d = std::ldexp(1.0f, -10);  // an fp16 value: the scale is exact
    std::mt19937 rng(23);
    std::vector<float> w(n * k);
    for (int64_t i = 0; i < n * k; ++i) {
        const int q = static_cast<int>(rng() % 201) - 100;
        w[i] = i % 32 == 0 ? 127 * d : (static_cast<float>(q) + 0.49f) * d;  // group max 127 d
    }
    std::vector<unsigned char> q8(quant_packed_bytes(WeightFormat::kQ8, n, k));
    std::vector<float> beta(n);
    ASSERT_TRUE(argmax_screen_pack(w.data(), n, k, q8.data(), beta.data()));
    std::vector<unsigned char> exact(2 * k * kFmaLinearBlock * 4);  // fp32, [2, k, 8]
    for (int64_t c = 0; c < n; ++c) {
        for (int64_t i = 0; i < k; ++i) {
            const int64_t at =
                ((c / kFmaLinearBlock) * k + i) * kFmaLinearBlock + c % kFmaLinearBlock;
            std::memcpy(exact.data() + at * 4, &w[c * k + i], 4);
        }
    }
    const std::vector<float> x(k, 1.0f);
    for (CpuIsa path : paths()) {
        std::vector<float> y(n), approx(n);
        fma_linear_blocks(path, WeightFormat::kF32, x.data(), 1, k, k, exact.data(), 0, 2, nullptr,
                          y.data(), n, n);
        fma_linear_blocks(path, WeightFormat::kQ8, x.data(), 1, k, k, q8.data(), 0, 1, nullptr,
                          approx.data(), n, n);
        for (int64_t c = 0; c < n; ++c) {
            const double err = std::fabs(static_cast<double>(y[c]) - approx[c]);
            EXPECT_LE(err, k * beta[c]) << "column " << c;
            EXPECT_GT(err, 0.9 * k * beta[c] * (k - 2) / k) << "column " << c;  // near worst case
        }
    }
}

TEST(ArgmaxScreen, ReturnsMinusOneWhenItCannotDecide) {
    const int64_t n = 64, k = 32;
    const Head h = make_head(n, k, 3);
    std::mt19937 rng(5);
    std::vector<float> x = make_x(h, rng, true), approx(n), scratch(n);
    const CpuIsa path = CpuIsa::kGeneric;
    fma_linear_blocks(path, WeightFormat::kQ8, x.data(), 1, k, k, h.q8.data(), 0, (n + 15) / 16,
                      nullptr, approx.data(), n, n);
    // The exact copies of column 0 tie: more candidates than allowed.
    EXPECT_EQ(argmax_screen_pick(path, WeightFormat::kBF16, h.exact.data(), n, k, x.data(),
                                 approx.data(), h.beta.data(), false, 1, scratch.data(), nullptr),
              -1);
    std::vector<float> bad = x;
    bad[3] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(argmax_screen_pick(path, WeightFormat::kBF16, h.exact.data(), n, k, bad.data(),
                                 approx.data(), h.beta.data(), false, n, scratch.data(), nullptr),
              -1);
    std::vector<float> bad_approx = approx;
    bad_approx[10] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(
        argmax_screen_pick(path, WeightFormat::kBF16, h.exact.data(), n, k, x.data(),
                           bad_approx.data(), h.beta.data(), false, n, scratch.data(), nullptr),
        -1);
}

TEST(ArgmaxScreen, RefusesWeightsThatAreNotFinite) {
    std::vector<float> w(16 * 32, 0.5f);
    w[40] = std::numeric_limits<float>::infinity();
    std::vector<unsigned char> q8(quant_packed_bytes(WeightFormat::kQ8, 16, 32));
    std::vector<float> beta(16);
    EXPECT_FALSE(argmax_screen_pack(w.data(), 16, 32, q8.data(), beta.data()));
}

}  // namespace
}  // namespace pylookahead
