// TokenSampler and uniform_at: determinism, the filters, and that draws follow the distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "lookahead/sampler.h"
#include "sampling_config.h"

namespace pylookahead {
namespace {

GenerationConfig sampling(double temperature, int top_k = 0, double top_p = 1.0,
                          uint64_t seed = 1) {
    return sampling_config(temperature, top_k, top_p, seed);
}

std::vector<float> logits_of(const std::vector<double>& probs) {
    std::vector<float> out;
    for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
    return out;
}

TEST(UniformAt, IsAPureFunctionOfSeedAndPosition) {
    EXPECT_EQ(uniform_at(3, 17), uniform_at(3, 17));
    EXPECT_NE(uniform_at(3, 17), uniform_at(3, 18));
    EXPECT_NE(uniform_at(3, 17), uniform_at(4, 17));
    double sum = 0.0;
    for (int64_t p = 0; p < 100000; ++p) {
        const double u = uniform_at(42, p);
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        sum += u;
    }
    EXPECT_NEAR(sum / 100000, 0.5, 0.005);
}

TEST(TokenSampler, TemperatureZeroIsArgmaxTiesToLowestId) {
    TokenSampler s(sampling(0.0));
    const std::vector<float> l = {0.5f, 2.0f, 2.0f, -1.0f};
    for (int64_t p = 0; p < 10; ++p) EXPECT_EQ(s.sample(l.data(), 4, p), 1);
}

TEST(TokenSampler, SameSeedAndPositionGiveTheSameToken) {
    const std::vector<float> l = logits_of({0.3, 0.3, 0.2, 0.2});
    TokenSampler a(sampling(1.0, 0, 1.0, 9)), b(sampling(1.0, 0, 1.0, 9));
    int differs = 0;
    for (int64_t p = 0; p < 200; ++p) {
        EXPECT_EQ(a.sample(l.data(), 4, p), b.sample(l.data(), 4, p));
        differs += a.sample(l.data(), 4, p) != a.sample(l.data(), 4, 0);
    }
    EXPECT_GT(differs, 50);  // positions are independent draws, not one repeated token
}

// Empirical frequencies over many positions against the exact distribution. Deterministic (the
// stream is a pure function), so the bound cannot flake: it was chosen as ~5 standard deviations.
void expect_frequencies(const GenerationConfig& g, const std::vector<float>& l,
                        const std::vector<double>& expected) {
    TokenSampler s(g);
    const int n = 200000;
    std::vector<int> counts(l.size(), 0);
    for (int64_t p = 0; p < n; ++p) ++counts[s.sample(l.data(), static_cast<int>(l.size()), p)];
    for (size_t i = 0; i < l.size(); ++i) {
        EXPECT_NEAR(static_cast<double>(counts[i]) / n, expected[i], 0.006) << "token " << i;
    }
}

TEST(TokenSampler, DrawsFollowTheSoftmax) {
    expect_frequencies(sampling(1.0), logits_of({0.5, 0.25, 0.15, 0.1}), {0.5, 0.25, 0.15, 0.1});
}

TEST(TokenSampler, TemperatureSharpens) {
    // p ~ q^(1/T): T = 0.5 squares the probabilities.
    const std::vector<double> q = {0.5, 0.25, 0.15, 0.1};
    double z = 0.0;
    for (double v : q) z += v * v;
    std::vector<double> expected;
    for (double v : q) expected.push_back(v * v / z);
    expect_frequencies(sampling(0.5), logits_of(q), expected);
}

TEST(TokenSampler, TopKKeepsTheKMostLikely) {
    // top_k = 2 of {0.1, 0.5, 0.15, 0.25}: ids 1 and 3, renormalised.
    expect_frequencies(sampling(1.0, 2), logits_of({0.1, 0.5, 0.15, 0.25}),
                       {0.0, 0.5 / 0.75, 0.0, 0.25 / 0.75});
}

TEST(TokenSampler, TopPKeepsTheSmallestSetReachingP) {
    // 0.5 < 0.7 <= 0.5 + 0.3: ids 0 and 1.
    expect_frequencies(sampling(1.0, 0, 0.7), logits_of({0.5, 0.3, 0.15, 0.05}),
                       {0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0});
    // Tiny top_p keeps only the most likely token.
    TokenSampler s(sampling(1.0, 0, 1e-6));
    const std::vector<float> l = logits_of({0.2, 0.3, 0.5});
    for (int64_t p = 0; p < 100; ++p) EXPECT_EQ(s.sample(l.data(), 3, p), 2);
}

TEST(TokenSampler, TopPOverALargeVocabularyGrowsItsSortedPrefix) {
    // 5000 tokens of equal weight: top_p = 0.5 keeps 2500 of them (more than the first sorted
    // chunk), the lowest ids on ties.
    std::vector<float> l(5000, 0.0f);
    TokenSampler s(sampling(1.0, 0, 0.5));
    int max_id = 0;
    for (int64_t p = 0; p < 4000; ++p)
        max_id = std::max(max_id, static_cast<int>(s.sample(l.data(), 5000, p)));
    EXPECT_LE(max_id, 2499);
    EXPECT_GE(max_id, 2400);
}

TEST(TokenSampler, NanAndMinusInfinityAreNeverDrawn) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float ninf = -std::numeric_limits<float>::infinity();
    const std::vector<float> l = {nan, 0.0f, ninf, 0.0f};
    TokenSampler s(sampling(1.0));
    for (int64_t p = 0; p < 1000; ++p) {
        const TokenId t = s.sample(l.data(), 4, p);
        EXPECT_TRUE(t == 1 || t == 3) << t;
    }
}

}  // namespace
}  // namespace pylookahead
