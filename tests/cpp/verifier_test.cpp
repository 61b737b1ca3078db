#include "lookahead/verifier.h"

#include <gtest/gtest.h>

#include <vector>

namespace pylookahead {
namespace {

using Tokens = std::vector<TokenId>;

TEST(VerifyGreedy, NoMatchEmitsT0) {
    const Tokens cands = {1, 2, 3, 4};  // two candidates of 2 tokens
    const Tokens preds = {9, 9, 9, 9};
    const VerifyResult r = verify_greedy(5, cands.data(), preds.data(), 2, 2);
    EXPECT_EQ(r.candidate, -1);
    EXPECT_EQ(r.num_accepted, 0);
    EXPECT_EQ(r.emitted, (Tokens{5}));
}

TEST(VerifyGreedy, NoCandidates) {
    const VerifyResult r = verify_greedy(5, nullptr, nullptr, 0, 3);
    EXPECT_EQ(r.candidate, -1);
    EXPECT_EQ(r.emitted, (Tokens{5}));
}

TEST(VerifyGreedy, FullMatchKeepsTheBonusToken) {
    const Tokens cands = {5, 6, 7};
    const Tokens preds = {6, 7, 8};  // argmax after 5, after 6, after 7
    const VerifyResult r = verify_greedy(5, cands.data(), preds.data(), 1, 3);
    EXPECT_EQ(r.candidate, 0);
    EXPECT_EQ(r.num_accepted, 3);
    EXPECT_EQ(r.emitted, (Tokens{5, 6, 7, 8}));
}

TEST(VerifyGreedy, PartialMatchEndsWithTheCorrection) {
    const Tokens cands = {5, 6, 1};
    const Tokens preds = {6, 7, 8};  // the model says 7 where the candidate says 1
    const VerifyResult r = verify_greedy(5, cands.data(), preds.data(), 1, 3);
    EXPECT_EQ(r.num_accepted, 2);
    EXPECT_EQ(r.emitted, (Tokens{5, 6, 7}));
}

TEST(VerifyGreedy, LongestWins) {
    const Tokens cands = {5, 1, 5, 6};
    const Tokens preds = {6, 0, 6, 2};
    const VerifyResult r = verify_greedy(5, cands.data(), preds.data(), 2, 2);
    EXPECT_EQ(r.candidate, 1);
    EXPECT_EQ(r.emitted, (Tokens{5, 6, 2}));
}

TEST(VerifyGreedy, TiesGoToTheEarliest) {
    const Tokens cands = {9, 9, 5, 1, 5, 2};
    const Tokens preds = {0, 0, 7, 0, 8, 0};  // slots 1 and 2 both accept one token
    const VerifyResult r = verify_greedy(5, cands.data(), preds.data(), 3, 2);
    EXPECT_EQ(r.candidate, 1);
    EXPECT_EQ(r.num_accepted, 1);
    EXPECT_EQ(r.emitted, (Tokens{5, 7}));
}

TEST(VerifyGreedy, IgnoresSlotsBeyondNumCandidates) {
    const Tokens cands = {1, 1, 5, 6};  // slot 1 is padding
    const Tokens preds = {0, 0, 6, 7};
    const VerifyResult r = verify_greedy(5, cands.data(), preds.data(), 1, 2);
    EXPECT_EQ(r.candidate, -1);
    EXPECT_EQ(r.emitted, (Tokens{5}));
}

}  // namespace
}  // namespace pylookahead
