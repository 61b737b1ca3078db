#include "lookahead/ngram_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace pylookahead {
namespace {

// The list of `key` as literal rows, oldest first.
std::vector<std::vector<TokenId>> entries(const NgramPool& pool, TokenId key) {
    const NgramPool::Candidates c = pool.find(key);
    std::vector<std::vector<TokenId>> out;
    for (int i = 0; i < c.count; ++i) {
        out.emplace_back(c.tokens + i * pool.ngram_len(), c.tokens + (i + 1) * pool.ngram_len());
    }
    return out;
}

using Rows = std::vector<std::vector<TokenId>>;

TEST(NgramPool, AppendsInInsertOrder) {
    NgramPool pool(/*ngram_len=*/2, /*capacity=*/3);
    const TokenId a[] = {1, 2}, b[] = {3, 4};
    pool.insert(7, a, NgramSource::kSeed);
    pool.insert(7, b, NgramSource::kWindow);
    EXPECT_EQ(entries(pool, 7), (Rows{{1, 2}, {3, 4}}));
    EXPECT_EQ(pool.find(8).count, 0);
    EXPECT_EQ(pool.size(), 2);
}

TEST(NgramPool, DuplicateIsRefreshedNotRepeated) {
    NgramPool pool(2, 3);
    const TokenId a[] = {1, 2}, b[] = {3, 4}, c[] = {5, 6};
    pool.insert(7, a, NgramSource::kSeed);
    pool.insert(7, b, NgramSource::kSeed);
    pool.insert(7, c, NgramSource::kSeed);
    pool.insert(7, a, NgramSource::kSeed);
    EXPECT_EQ(entries(pool, 7), (Rows{{3, 4}, {5, 6}, {1, 2}}));
    EXPECT_EQ(pool.size(), 3);
}

TEST(NgramPool, EvictsOldestWhenFull) {
    NgramPool pool(3, 2);
    const TokenId a[] = {1, 1, 1}, b[] = {2, 2, 2}, c[] = {3, 3, 3}, d[] = {4, 4, 4};
    pool.insert(0, a, NgramSource::kWindow);
    pool.insert(0, b, NgramSource::kWindow);
    pool.insert(0, c, NgramSource::kWindow);
    EXPECT_EQ(entries(pool, 0), (Rows{{2, 2, 2}, {3, 3, 3}}));
    pool.insert(0, b, NgramSource::kWindow);  // refresh b: c becomes the oldest
    pool.insert(0, d, NgramSource::kWindow);
    EXPECT_EQ(entries(pool, 0), (Rows{{2, 2, 2}, {4, 4, 4}}));
}

TEST(NgramPool, KeysAreIndependent) {
    NgramPool pool(1, 1);
    const TokenId a[] = {10}, b[] = {11};
    pool.insert(1, a, NgramSource::kSeed);
    pool.insert(2, b, NgramSource::kSeed);
    EXPECT_EQ(entries(pool, 1), (Rows{{10}}));
    EXPECT_EQ(entries(pool, 2), (Rows{{11}}));
    EXPECT_EQ(pool.size(), 2);
    pool.clear();
    EXPECT_EQ(pool.size(), 0);
}

TEST(NgramPool, CapacityZeroStoresNothing) {
    NgramPool pool(2, 0);
    const TokenId a[] = {1, 2};
    pool.insert(7, a, NgramSource::kSeed);
    EXPECT_EQ(pool.find(7).count, 0);
    EXPECT_EQ(pool.size(), 0);
}

TEST(NgramPool, SourceIsThatOfTheLatestInsert) {
    NgramPool pool(2, 4);
    const TokenId a[] = {1, 2}, b[] = {3, 4};
    pool.insert(7, a, NgramSource::kSeed);
    pool.insert(7, b, NgramSource::kWindow);
    NgramPool::Candidates c = pool.find(7);
    ASSERT_EQ(c.count, 2);
    EXPECT_EQ(c.sources[0], NgramSource::kSeed);
    EXPECT_EQ(c.sources[1], NgramSource::kWindow);
    pool.insert(7, a, NgramSource::kWindow);  // refreshed by the window
    c = pool.find(7);
    EXPECT_EQ(entries(pool, 7), (Rows{{3, 4}, {1, 2}}));
    EXPECT_EQ(c.sources[0], NgramSource::kWindow);
    EXPECT_EQ(c.sources[1], NgramSource::kWindow);
    pool.insert(7, b, NgramSource::kSeed);
    c = pool.find(7);
    EXPECT_EQ(entries(pool, 7), (Rows{{1, 2}, {3, 4}}));
    EXPECT_EQ(c.sources[1], NgramSource::kSeed);
}

}  // namespace
}  // namespace pylookahead
