#include "lookahead/jacobi_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

namespace pylookahead {
namespace {

using Tokens = std::vector<TokenId>;

Tokens ngram(const NgramPool& pool, TokenId key, int index) {
    const NgramPool::Candidates c = pool.find(key);
    EXPECT_LT(index, c.count) << "key " << key;
    if (index >= c.count) return {};
    const int len = pool.ngram_len();
    return Tokens(c.tokens + index * len, c.tokens + (index + 1) * len);
}

TEST(JacobiWindow, InitIsDeterministicAndDrawsFromThePrompt) {
    const Tokens prompt = {11, 12, 13, 14, 15, 16, 17};
    JacobiWindow a(8, 5), b(8, 5), c(8, 5);
    a.init(prompt, 42);
    b.init(prompt, 42);
    c.init(prompt, 43);
    ASSERT_EQ(a.cells().size(), 32u);
    EXPECT_EQ(a.cells(), b.cells());
    EXPECT_NE(a.cells(), c.cells());
    EXPECT_EQ(a.cells()[0], 0);  // the slot of x
    std::set<TokenId> seen(a.cells().begin() + 1, a.cells().end());
    for (TokenId t : seen) EXPECT_TRUE(std::count(prompt.begin(), prompt.end(), t)) << t;
    EXPECT_EQ(seen.size(), prompt.size());  // 31 draws over 7 tokens hit all of them
    a.init(prompt, 42);                     // re-init restarts the generator
    EXPECT_EQ(a.cells(), b.cells());
}

// Spec section 4.4, W=3, N=3: level 0 = a1 a2, level 1 = b0 b1 b2.
TEST(JacobiWindow, HarvestAndShiftMatchTheSpecExample) {
    enum : TokenId { x = 1, a1, a2, b0, b1, b2, n0, n1, n2 };
    JacobiWindow w(3, 3);
    const Tokens fill1 = {0, a1, a2}, fill2 = {b0, b1, b2};
    w.shift(fill1.data());  // level 0 <- fill1[1:]
    w.shift(fill2.data());  // level 0 <- level 1 [1:] = a1 a2, level 1 <- fill2
    EXPECT_EQ(w.cells(), (Tokens{0, a1, a2, b0, b1, b2}));

    NgramPool pool(2, 4);
    const Tokens next = {n0, n1, n2};
    w.harvest(x, next.data(), &pool);
    EXPECT_EQ(pool.size(), 3);
    EXPECT_EQ(ngram(pool, x, 0), (Tokens{b0, n0}));
    EXPECT_EQ(ngram(pool, a1, 0), (Tokens{b1, n1}));
    EXPECT_EQ(ngram(pool, a2, 0), (Tokens{b2, n2}));
    EXPECT_EQ(pool.find(x).sources[0], NgramSource::kWindow);

    w.shift(next.data());
    EXPECT_EQ(w.cells(), (Tokens{0, b1, b2, n0, n1, n2}));
    EXPECT_EQ(w.at(1, 2), n2);
}

TEST(JacobiWindow, HarvestRunsDownEachColumn) {
    JacobiWindow w(3, 4);  // levels 0..2
    const Tokens s1 = {10, 11, 12}, s2 = {20, 21, 22}, s3 = {30, 31, 32}, next = {40, 41, 42};
    w.shift(s1.data());
    w.shift(s2.data());
    w.shift(s3.data());
    // Each shift moves every level up by one: s1 reached level 0 (minus column 0), s3 is last.
    EXPECT_EQ(w.cells(), (Tokens{0, 11, 12, 20, 21, 22, 30, 31, 32}));
    NgramPool pool(3, 4);
    w.harvest(7, next.data(), &pool);
    EXPECT_EQ(ngram(pool, 7, 0), (Tokens{20, 30, 40}));
    EXPECT_EQ(ngram(pool, 11, 0), (Tokens{21, 31, 41}));
    EXPECT_EQ(ngram(pool, 12, 0), (Tokens{22, 32, 42}));
}

TEST(JacobiWindow, NgramSizeTwoIsRowZeroOnly) {
    JacobiWindow w(3, 2);
    const Tokens next = {5, 6, 7};
    w.shift(next.data());
    EXPECT_EQ(w.cells(), (Tokens{0, 6, 7}));
    NgramPool pool(1, 2);
    const Tokens next2 = {1, 2, 3};
    w.harvest(9, next2.data(), &pool);
    EXPECT_EQ(ngram(pool, 9, 0), (Tokens{1}));
    EXPECT_EQ(ngram(pool, 6, 0), (Tokens{2}));
    EXPECT_EQ(ngram(pool, 7, 0), (Tokens{3}));
}

TEST(JacobiWindow, SingleColumn) {
    JacobiWindow w(1, 3);
    w.init({4}, 0);
    EXPECT_EQ(w.cells(), (Tokens{0, 4}));
    NgramPool pool(2, 1);
    const TokenId next = 8;
    w.harvest(3, &next, &pool);
    EXPECT_EQ(ngram(pool, 3, 0), (Tokens{4, 8}));
    w.shift(&next);
    EXPECT_EQ(w.cells(), (Tokens{0, 8}));
}

}  // namespace
}  // namespace pylookahead
