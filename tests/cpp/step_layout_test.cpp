#include "lookahead/step_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

namespace pylookahead {
namespace {

StepLayout layout_for(int W, int N, int G) {
    LookaheadConfig config;
    config.window_size = W;
    config.ngram_size = N;
    config.verification_set_size = G;
    return build_step_layout(step_budget(config));
}

// The mask as one string per row, '1' = may attend, '.' = masked.
std::vector<std::string> mask_rows(const StepLayout& layout) {
    const int T = layout.budget.tokens_per_step;
    std::vector<std::string> rows(T, std::string(T, '.'));
    for (int q = 0; q < T; ++q) {
        for (int k = 0; k < T; ++k) {
            if (layout.mask[q * T + k]) rows[q][k] = '1';
        }
    }
    return rows;
}

// Spec section 4.4.
TEST(StepLayout, GoldenW3N3G2) {
    const StepLayout layout = layout_for(3, 3, 2);
    const StepBudget& b = layout.budget;
    EXPECT_EQ(b.tokens_per_step, 10);
    EXPECT_EQ(b.last_level_begin, 3);
    EXPECT_EQ(b.verify_begin, 6);
    EXPECT_EQ(b.max_accept, 3);
    //                                     x  a1 a2 b0 b1 b2 u1 u2 v1 v2
    EXPECT_EQ(layout.offsets, (std::vector<int32_t>{0, 1, 2, 1, 2, 3, 1, 2, 1, 2}));
    const std::vector<std::string> golden = {
        // x a1 a2 b0 b1 b2 u1 u2 v1 v2
        "1.........",  // x
        "11........",  // a1
        "111.......",  // a2
        "1..1......",  // b0
        "11..1.....",  // b1
        "111..1....",  // b2
        "1.....1...",  // u1
        "1.....11..",  // u2
        "1.......1.",  // v1
        "1.......11",  // v2
    };
    EXPECT_EQ(mask_rows(layout), golden);
    EXPECT_EQ(layout.out_rows, (std::vector<int32_t>{0, 3, 4, 5, 6, 7, 8, 9}));
    EXPECT_EQ(layout.out_last_level, 1);
    EXPECT_EQ(layout.out_verify, 4);
}

// The diagram in step_layout.h (the case of llama.cpp's and the blog's figures).
TEST(StepLayout, GoldenW5N4G2) {
    const StepLayout layout = layout_for(5, 4, 2);
    EXPECT_EQ(layout.budget.tokens_per_step, 21);
    EXPECT_EQ(layout.offsets, (std::vector<int32_t>{0, 1, 2, 3, 4,        // x a1..a4
                                                    1, 2, 3, 4, 5,        // b0..b4
                                                    2, 3, 4, 5, 6,        // c0..c4
                                                    1, 2, 3, 1, 2, 3}));  // u1..u3 v1..v3
    const std::vector<std::string> golden = {
        // x a1a2a3a4b0b1b2b3b4c0c1c2c3c4u1u2u3v1v2v3
        "1....................",  // x
        "11...................",  // a1
        "111..................",  // a2
        "1111.................",  // a3
        "11111................",  // a4
        "1....1...............",  // b0
        "11....1..............",  // b1
        "111....1.............",  // b2
        "1111....1............",  // b3
        "11111....1...........",  // b4
        "1....1....1..........",  // c0
        "11....1....1.........",  // c1
        "111....1....1........",  // c2
        "1111....1....1.......",  // c3
        "11111....1....1......",  // c4
        "1..............1.....",  // u1
        "1..............11....",  // u2
        "1..............111...",  // u3
        "1.................1..",  // v1
        "1.................11.",  // v2
        "1.................111",  // v3
    };
    EXPECT_EQ(mask_rows(layout), golden);
    EXPECT_EQ(layout.out_rows,
              (std::vector<int32_t>{0, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}));
    EXPECT_EQ(layout.out_last_level, 1);
    EXPECT_EQ(layout.out_verify, 6);
}

TEST(StepLayout, NgramSizeTwoReadsAllOfRowZero) {
    const StepLayout layout = layout_for(3, 2, 2);
    EXPECT_EQ(layout.budget.tokens_per_step, 5);
    EXPECT_EQ(layout.offsets, (std::vector<int32_t>{0, 1, 2, 1, 1}));
    EXPECT_EQ(mask_rows(layout),
              (std::vector<std::string>{"1....", "11...", "111..", "1..1.", "1...1"}));
    EXPECT_EQ(layout.out_rows, (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(layout.out_last_level, 0);
    EXPECT_EQ(layout.out_verify, 3);
}

TEST(StepLayout, NoVerificationBranchWhenGIsZero) {
    const StepLayout layout = layout_for(4, 3, 0);
    EXPECT_EQ(layout.budget.tokens_per_step, 8);
    EXPECT_EQ(layout.budget.verify_begin, 8);
    EXPECT_EQ(layout.out_rows, (std::vector<int32_t>{0, 4, 5, 6, 7}));
    EXPECT_EQ(layout.out_verify, 5);
}

// W = 0: x, then the candidates; no window rows, nothing read but x and the candidates.
TEST(StepLayout, GoldenVerificationOnlyW0N4G2) {
    const StepLayout layout = layout_for(0, 4, 2);
    const StepBudget& b = layout.budget;
    EXPECT_EQ(b.tokens_per_step, 7);
    EXPECT_EQ(b.verify_begin, 1);
    EXPECT_EQ(b.max_accept, 4);
    //                                     x  u1 u2 u3 v1 v2 v3
    EXPECT_EQ(layout.offsets, (std::vector<int32_t>{0, 1, 2, 3, 1, 2, 3}));
    EXPECT_EQ(mask_rows(layout), (std::vector<std::string>{
                                     "1......",  // x
                                     "11.....",  // u1
                                     "111....",  // u2
                                     "1111...",  // u3
                                     "1...1..",  // v1
                                     "1...11.",  // v2
                                     "1...111",  // v3
                                 }));
    EXPECT_EQ(layout.out_rows, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(layout.out_last_level, 1);
    EXPECT_EQ(layout.out_verify, 1);
    EXPECT_EQ(layout.exact_rows, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
}

class StepLayoutGrid : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// Each row's visible rows are itself plus a set whose positions are exactly offsets 0..own - 1
// (the context a sequential decoder would have); window and verification rows never mix.
TEST_P(StepLayoutGrid, EveryRowSeesAContiguousPrefix) {
    const auto [W, N, G] = GetParam();
    const StepLayout layout = layout_for(W, N, G);
    const StepBudget& b = layout.budget;
    const int T = b.tokens_per_step;
    ASSERT_EQ(T, W == 0 ? 1 + G * (N - 1) : (W + G) * (N - 1));
    ASSERT_EQ(layout.offsets.size(), static_cast<size_t>(T));
    ASSERT_EQ(layout.mask.size(), static_cast<size_t>(T) * T);
    for (int q = 0; q < T; ++q) {
        EXPECT_TRUE(layout.mask[q * T + q]) << "row " << q;
        std::vector<int32_t> seen;
        for (int k = 0; k < T; ++k) {
            if (!layout.mask[q * T + k]) continue;
            seen.push_back(layout.offsets[k]);
            const bool q_verify = q >= b.verify_begin, k_verify = k >= b.verify_begin;
            if (k != 0 && q_verify != k_verify) ADD_FAILURE() << "branches mix: " << q << "->" << k;
            if (q_verify && k_verify) {
                EXPECT_EQ((q - b.verify_begin) / b.candidate_len(),
                          (k - b.verify_begin) / b.candidate_len())
                    << "candidates see each other: " << q << "->" << k;
            }
        }
        std::sort(seen.begin(), seen.end());
        for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], static_cast<int32_t>(i));
        EXPECT_EQ(seen.back(), layout.offsets[q]);
    }
    EXPECT_TRUE(std::is_sorted(layout.out_rows.begin(), layout.out_rows.end()));
    EXPECT_EQ(layout.out_rows.size(),
              static_cast<size_t>(1 + W + G * (N - 1) - (N == 2 && W > 0 ? 1 : 0)));
    EXPECT_EQ(layout.out_rows[0], 0);
    EXPECT_EQ(layout.out_verify - layout.out_last_level, W);
    if (W > 0) EXPECT_EQ(layout.out_rows[layout.out_last_level], b.last_level_begin);
    EXPECT_EQ(layout.out_rows.size() - layout.out_verify, static_cast<size_t>(G * (N - 1)));
}

INSTANTIATE_TEST_SUITE_P(Grid, StepLayoutGrid,
                         ::testing::Combine(::testing::Values(1, 2, 5, 16),
                                            ::testing::Values(2, 3, 4, 7),
                                            ::testing::Values(0, 1, 3, 16)));
INSTANTIATE_TEST_SUITE_P(VerificationOnly, StepLayoutGrid,
                         ::testing::Combine(::testing::Values(0), ::testing::Values(2, 3, 4, 7),
                                            ::testing::Values(1, 3, 16)));

}  // namespace
}  // namespace pylookahead
