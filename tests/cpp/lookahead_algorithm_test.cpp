#include "lookahead/lookahead_algorithm.h"

#include <gtest/gtest.h>

#include <vector>

namespace pylookahead {
namespace {

using Tokens = std::vector<TokenId>;

LookaheadConfig w2n3g2() {
    LookaheadConfig c;
    c.window_size = 2;
    c.ngram_size = 3;
    c.verification_set_size = 2;
    c.seed = 3;
    return c;
}

// Seeded from prompt + first token 9: (1 2 3) (2 3 1) (3 1 2) (1 2 4) (2 4 9).
const Tokens kPrompt = {1, 2, 3, 1, 2, 4};

TEST(LookaheadAlgorithm, PrepareLaysOutWindowAndCandidatesBestFirst) {
    LookaheadAlgorithm algo(w2n3g2(), nullptr, /*fixed_shapes=*/true);
    algo.start(kPrompt, 9);
    EXPECT_EQ(algo.pool().size(), 5);
    const Tokens& cells = algo.window().cells();  // [0, a1, b0, b1]
    const Tokens tokens = algo.prepare(1).tokens;
    ASSERT_EQ(tokens.size(), 8u);
    // Neither entry's context (none; 1 2 3) ends like the text before now (2 4 9): newest first.
    EXPECT_EQ(tokens, (Tokens{1, cells[1], cells[2], cells[3], 2, 4, 2, 3}));
    EXPECT_EQ(algo.prepare(9).tokens,
              (Tokens{9, cells[1], cells[2], cells[3], 9, 9, 9, 9}));  // padded
}

TEST(LookaheadAlgorithm, WithoutFixedShapesAPlanHasOnlyItsRealRows) {
    LookaheadAlgorithm algo(w2n3g2());
    algo.start(kPrompt, 9);
    const Tokens& cells = algo.window().cells();
    EXPECT_EQ(algo.prepare(9).tokens, (Tokens{9, cells[1], cells[2], cells[3]}));
    // Key 3 has one n-gram, (3 1 2): one candidate of the two slots.
    const StepPlan& plan = algo.prepare(3);
    EXPECT_EQ(plan.tokens, (Tokens{3, cells[1], cells[2], cells[3], 1, 2}));
    EXPECT_EQ(plan.out_rows, (std::vector<int32_t>{0, 2, 3, 4, 5}));
    EXPECT_EQ(plan.exact_rows, (std::vector<int32_t>{0, 4, 5}));
}

TEST(LookaheadAlgorithm, UpdateVerifiesCommitsAndSlides) {
    LookaheadAlgorithm algo(w2n3g2(), nullptr, /*fixed_shapes=*/true);
    algo.start(kPrompt, 9);
    const TokenId b1 = algo.window().cells()[3];
    algo.prepare(1);
    // out_rows = {0, 2, 3, 4, 5, 6, 7}: t0, the last level (new guesses), candidates (2 4), (2 3).
    // Candidate 1 matches one token (the model says 4 after 2), candidate 0 both, bonus 8.
    const StepOutcome out = algo.update({2, 50, 51, 4, 8, 4, 0});
    EXPECT_EQ(out.emitted, (Tokens{2, 4, 8}));
    EXPECT_EQ(out.num_accepted, 2);
    EXPECT_EQ(out.commit_rows, (std::vector<int32_t>{0, 4, 5}));
    EXPECT_EQ(algo.window().cells(), (Tokens{0, b1, 50, 51}));
    // Seeding added (2 4 8), the n-gram ending in the last emitted token, as the newest for 2.
    const NgramPool pool = algo.pool();
    const NgramPool::Candidates c = pool.find(2);
    ASSERT_GE(c.count, 1);
    EXPECT_EQ(Tokens(c.tokens + (c.count - 1) * 2, c.tokens + c.count * 2), (Tokens{4, 8}));
    EXPECT_EQ(c.sources[c.count - 1], NgramSource::kSeed);
}

TEST(LookaheadAlgorithm, CandidatesWhoseContextMatchesTheTextComeFirst) {
    // Key 5 is followed by (6 7) after "1 2 3" and later by (8 9) after "4 4 4". With G = 1 the
    // step verifies only the entry whose context ends like the text before x now.
    LookaheadConfig config;
    config.window_size = 0;
    config.ngram_size = 3;
    config.verification_set_size = 1;
    LookaheadAlgorithm algo(config);
    // x = 5 (the first token) after "1 2 3": (6 7), the older entry, has that context.
    algo.start({1, 2, 3, 5, 6, 7, 4, 4, 4, 5, 8, 9, 1, 2, 3}, 5);
    EXPECT_EQ(algo.prepare(5).tokens, (Tokens{5, 6, 7}));
    const StepOutcome out = algo.update({6, 7, 0});
    EXPECT_EQ(out.emitted, (Tokens{6, 7, 0}));
    EXPECT_EQ(out.num_accepted, 2);

    // After "0 4 4": two context tokens of the older (8 9) match, none of the newer (6 7).
    LookaheadAlgorithm second(config);
    second.start({4, 4, 4, 5, 8, 9, 1, 2, 3, 5, 6, 7, 0, 4, 4}, 5);
    EXPECT_EQ(second.prepare(5).tokens, (Tokens{5, 8, 9}));

    // No context matches: the newest entry.
    LookaheadAlgorithm third(config);
    third.start({4, 4, 4, 5, 8, 9, 1, 2, 3, 5, 6, 7, 0, 0, 0}, 5);
    EXPECT_EQ(third.prepare(5).tokens, (Tokens{5, 6, 7}));
}

TEST(LookaheadAlgorithm, NoSeedingLeavesThePoolToTheWindow) {
    LookaheadConfig config = w2n3g2();
    config.seed_from_prompt = false;
    LookaheadAlgorithm algo(config, nullptr, /*fixed_shapes=*/true);
    algo.start(kPrompt, 9);
    EXPECT_EQ(algo.pool().size(), 0);
    algo.prepare(1);
    const StepOutcome out = algo.update({7, 50, 51, 0, 0, 0, 0});
    EXPECT_EQ(out.emitted, (Tokens{7}));
    EXPECT_EQ(out.commit_rows, (std::vector<int32_t>{0}));
    EXPECT_GE(algo.pool().size(), 1);  // W harvested n-grams (fewer if their keys coincide)
    EXPECT_LE(algo.pool().size(), 2);
    EXPECT_EQ(algo.pool().find(1).sources[0], NgramSource::kWindow);
}

}  // namespace
}  // namespace pylookahead
