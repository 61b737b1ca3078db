#include "lookahead/ngram_pool.h"
#include "lookahead/shared_pool.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pylookahead/errors.h"

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

TEST(NgramPool, ReshapedKeepsPrefixesAndTheMostRecent) {
    NgramPool pool(/*ngram_len=*/3, /*capacity=*/3);
    const TokenId a[] = {1, 2, 3}, b[] = {1, 2, 4}, c[] = {5, 6, 7};
    pool.insert(9, a, NgramSource::kSeed);
    pool.insert(9, b, NgramSource::kWindow);
    pool.insert(9, c, NgramSource::kWindow);
    // Shorter: {1,2} twice collapses into one entry, refreshed by the later insert.
    const NgramPool shorter = pool.reshaped(2, 3);
    EXPECT_EQ(entries(shorter, 9), (Rows{{1, 2}, {5, 6}}));
    // Smaller capacity keeps the newest.
    EXPECT_EQ(entries(pool.reshaped(3, 1), 9), (Rows{{5, 6, 7}}));
    // Longer n-grams cannot be made up: empty.
    EXPECT_EQ(pool.reshaped(4, 3).size(), 0);
}

TEST(SharedPool, TextsAreCappedAndRebuildAPoolOfAnyLength) {
    SharedPool shared;
    shared.add_text({1, 2, 3, 4, 5});
    shared.add_text({7, 1, 2, 9});
    const NgramPool pool = shared.pool_from_texts(2, 16);
    EXPECT_EQ(entries(pool, 1), (Rows{{2, 3}, {2, 9}}));  // oldest text first
    EXPECT_EQ(entries(pool, 3), (Rows{{4, 5}}));
    EXPECT_TRUE(entries(pool, 4).empty());  // no 2 tokens after it
    EXPECT_EQ(pool.size(), 3 + 2);
    std::vector<int> order;
    const TokenId recent[NgramPool::kContextLen] = {NgramPool::kUnknown, NgramPool::kUnknown, 7};
    const NgramPool::Candidates c = pool.select(1, recent, 1, &order);
    ASSERT_EQ(order.size(), 1u);
    EXPECT_EQ(c.tokens[order[0] * 2 + 1], 9);  // its context (the 7 before the key) was kept
    // Beyond kMaxTextTokens the oldest texts go (the newest always stays).
    shared.add_text(std::vector<TokenId>(SharedPool::kMaxTextTokens - 5, 3));
    EXPECT_EQ(shared.texts().size(), 2u);
    EXPECT_EQ(shared.text_tokens(), 4 + SharedPool::kMaxTextTokens - 5);
    shared.add_text(std::vector<TokenId>(SharedPool::kMaxTextTokens + 1, 3));
    EXPECT_EQ(shared.texts().size(), 1u);
    // A run that does not keep the pool empties it and its texts.
    shared.start_run(2, 4, /*keep=*/false);
    EXPECT_TRUE(shared.texts().empty());
    EXPECT_EQ(shared.text_tokens(), 0);
}

TEST(SharedPool, StartRunRebuildsForALongerNAndReshapesOtherwise) {
    SharedPool shared;
    shared.write([](NgramPool& pool) {
        pool = NgramPool(1, 4);
        const TokenId gram[] = {2};
        pool.insert(1, gram, NgramSource::kWindow);
    });
    shared.add_text({1, 2, 3, 4});
    // Same N: the pool is kept as it is (the window's entry stays), the texts come back.
    shared.start_run(1, 4, /*keep=*/true);
    const SharedPool::Texts kept = shared.texts();
    ASSERT_EQ(kept.size(), 1u);
    EXPECT_EQ(kept[0], (std::vector<TokenId>{1, 2, 3, 4}));
    EXPECT_EQ(shared.snapshot().first.find(1).sources[0], NgramSource::kWindow);
    // A longer N cannot come from cutting: rebuilt from the texts.
    shared.start_run(2, 4, /*keep=*/true);
    const NgramPool longer = shared.snapshot().first;
    EXPECT_EQ(longer.ngram_len(), 2);
    EXPECT_EQ(entries(longer, 1), (Rows{{2, 3}}));
    EXPECT_EQ(entries(longer, 2), (Rows{{3, 4}}));
    // A shorter N: the entries are cut.
    shared.start_run(1, 4, /*keep=*/true);
    EXPECT_EQ(entries(shared.snapshot().first, 1), (Rows{{2}}));
}

TEST(SharedPool, ReplaceCapsTheTextsAsAddTextDoes) {
    SharedPool shared;
    SharedPool::Texts texts;
    texts.push_back(std::vector<TokenId>(10, 1));
    texts.push_back(std::vector<TokenId>(SharedPool::kMaxTextTokens, 2));
    shared.replace(NgramPool(3, 2), texts);
    ASSERT_EQ(shared.texts().size(), 1u);  // the older text no longer fits
    EXPECT_EQ(shared.texts()[0][0], 2);
    EXPECT_EQ(shared.text_tokens(), SharedPool::kMaxTextTokens);
    EXPECT_EQ(shared.snapshot().first.ngram_len(), 3);
}

// Two threads growing and reading one pool: every method locks, so no insert or text is lost.
TEST(SharedPool, ParallelWritersLoseNothing) {
    SharedPool shared;
    shared.start_run(1, 4, /*keep=*/false);
    auto writer = [&shared](TokenId base) {
        for (TokenId k = 0; k < 2000; ++k) {
            const TokenId gram[] = {k};
            shared.write([&](NgramPool& pool) { pool.insert(base + k, gram, NgramSource::kSeed); });
            if (k % 100 == 0) shared.add_text({base, k});
            shared.read([&](const NgramPool& pool) { return pool.size(); });
        }
    };
    std::thread a(writer, 0), b(writer, 100000);
    a.join();
    b.join();
    EXPECT_EQ(shared.size(), 4000);
    EXPECT_EQ(shared.texts().size(), 40u);
    EXPECT_EQ(shared.text_tokens(), 80);
}

TEST(NgramPool, SelectRanksByMatchedContextThenRecency) {
    NgramPool pool(1, 8);
    const TokenId a[] = {10}, b[] = {11}, c[] = {12}, d[] = {13}, e[] = {14};
    const TokenId ctx_a[] = {1, 2, 3}, ctx_b[] = {9, 9, 3}, ctx_d[] = {5, 2, 3},
                  ctx_e[] = {7, 7, 3};
    pool.insert(4, a, NgramSource::kSeed, ctx_a);
    pool.insert(4, b, NgramSource::kSeed, ctx_b);
    pool.insert(4, c, NgramSource::kWindow);  // no context
    pool.insert(4, d, NgramSource::kSeed, ctx_d);
    pool.insert(4, e, NgramSource::kSeed, ctx_e);
    const TokenId recent[] = {1, 2, 3};
    std::vector<int> order;
    pool.select(4, recent, 8, &order);
    // a: 3 tokens match, d: 2, then e and b (1 each, e newer), then c (0).
    EXPECT_EQ(order, (std::vector<int>{0, 3, 4, 1, 2}));
    pool.select(4, recent, 2, &order);
    EXPECT_EQ(order, (std::vector<int>{0, 3}));
    // Matching stops at the first differing token from the end: "1 2 0" matches nobody.
    const TokenId other[] = {1, 2, 0};
    pool.select(4, other, 3, &order);
    EXPECT_EQ(order, (std::vector<int>{4, 3, 2}));  // newest first
    pool.select(5, recent, 3, &order);
    EXPECT_TRUE(order.empty());
    // Unknown never matches, not even unknown.
    const TokenId unknown[] = {NgramPool::kUnknown, NgramPool::kUnknown, NgramPool::kUnknown};
    NgramPool blank(1, 2);
    blank.insert(4, a, NgramSource::kSeed);
    blank.insert(4, b, NgramSource::kSeed, unknown);
    blank.select(4, unknown, 2, &order);
    EXPECT_EQ(order, (std::vector<int>{1, 0}));
}

TEST(NgramPool, RefreshKeepsTheContextUnlessGivenANewOne) {
    NgramPool pool(1, 4);
    const TokenId a[] = {10}, b[] = {11};
    const TokenId ctx1[] = {1, 2, 3}, ctx2[] = {4, 5, 6};
    pool.insert(4, a, NgramSource::kSeed, ctx1);
    pool.insert(4, b, NgramSource::kSeed);
    pool.insert(4, a, NgramSource::kWindow);  // the window refreshes a: context stays 1 2 3
    NgramPool::Candidates c = pool.find(4);
    ASSERT_EQ(c.count, 2);
    EXPECT_EQ(std::vector<TokenId>(c.contexts + 3, c.contexts + 6),
              (std::vector<TokenId>{1, 2, 3}));
    pool.insert(4, a, NgramSource::kSeed, ctx2);
    c = pool.find(4);
    EXPECT_EQ(std::vector<TokenId>(c.contexts + 3, c.contexts + 6),
              (std::vector<TokenId>{4, 5, 6}));
    EXPECT_EQ(std::vector<TokenId>(c.contexts, c.contexts + 3),
              (std::vector<TokenId>(3, NgramPool::kUnknown)));
}

TEST(NgramPool, WriteThenReadIsTheSamePool) {
    NgramPool pool(2, 2);
    const TokenId a[] = {1, 2}, b[] = {3, 4}, c[] = {5, 6};
    const TokenId ctx[] = {NgramPool::kUnknown, 9, 0};
    pool.insert(7, a, NgramSource::kSeed, ctx);
    pool.insert(7, b, NgramSource::kWindow);
    pool.insert(0, c, NgramSource::kWindow);
    std::stringstream data;
    pool.write(data);
    const NgramPool back = NgramPool::read(data, "mem", /*vocab_size=*/10);
    EXPECT_TRUE(back == pool);
    EXPECT_EQ(entries(back, 7), (Rows{{1, 2}, {3, 4}}));
    EXPECT_EQ(back.find(7).sources[1], NgramSource::kWindow);
    EXPECT_EQ(std::vector<TokenId>(back.find(7).contexts, back.find(7).contexts + 3),
              (std::vector<TokenId>{NgramPool::kUnknown, 9, 0}));
}

TEST(NgramPool, ReadsTheVersionOneFormWithoutContexts) {
    // ngram_len 1, capacity 2, 1 key: id 7, 1 entry: source 0, token 3 (no context).
    std::string bytes;
    for (uint32_t v : {1u, 2u, 1u, 7u, 1u}) bytes.append(reinterpret_cast<const char*>(&v), 4);
    bytes.push_back('\0');
    const uint32_t token = 3;
    bytes.append(reinterpret_cast<const char*>(&token), 4);
    std::stringstream data(bytes);
    const NgramPool pool = NgramPool::read(data, "v1", 10, /*with_contexts=*/false);
    EXPECT_EQ(entries(pool, 7), (Rows{{3}}));
    EXPECT_EQ(pool.find(7).contexts[2], NgramPool::kUnknown);
}

std::string error_of(const std::string& bytes, int vocab_size) {
    std::stringstream data(bytes);
    try {
        NgramPool::read(data, "pool.bin", vocab_size);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

TEST(NgramPool, ReadRejectsTruncatedOrOutOfRangeData) {
    NgramPool pool(2, 2);
    const TokenId a[] = {1, 8};
    pool.insert(7, a, NgramSource::kSeed);
    std::stringstream data;
    pool.write(data);
    const std::string bytes = data.str();
    EXPECT_NE(error_of(bytes.substr(0, bytes.size() - 2), 10).find("pool.bin: truncated"),
              std::string::npos);
    // Token 8 is outside a vocabulary of 8.
    EXPECT_NE(error_of(bytes, 8).find("pool.bin: pool token must be in [0, 7] (got 8)"),
              std::string::npos)
        << error_of(bytes, 8);
    EXPECT_EQ(error_of(bytes, 10), "");
    // Context ids are checked like tokens, with 0xFFFFFFFF (unknown) allowed.
    NgramPool with_context(1, 1);
    const TokenId one[] = {1}, ctx[] = {NgramPool::kUnknown, 2, 9};
    with_context.insert(3, one, NgramSource::kSeed, ctx);
    std::stringstream ctx_data;
    with_context.write(ctx_data);
    EXPECT_NE(
        error_of(ctx_data.str(), 9)
            .find("pool.bin: pool context token must be in [0, 8] or 4294967295 (unknown) (got 9)"),
        std::string::npos)
        << error_of(ctx_data.str(), 9);
    EXPECT_EQ(error_of(ctx_data.str(), 10), "");
}

}  // namespace
}  // namespace pylookahead
