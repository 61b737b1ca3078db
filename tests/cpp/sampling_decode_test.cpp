// The decode loop with sampling, cache reuse, a kept pool and callback stops, on ChainLm: a fake
// LM whose logits are a pure function of the visible context (so any token sequence is valid,
// unlike OracleLm), strongly preferring one "chain" successor of the last token, so that sampled
// text is predictable enough for lookahead to accept n-grams, yet deviates now and then.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "lookahead/decode_loop.h"
#include "oracle_lm.h"
#include "oracle_text.h"
#include "pylookahead/errors.h"
#include "sampling_config.h"

namespace pylookahead {
namespace {

using Tokens = std::vector<TokenId>;
constexpr int kVocab = 48;

class ChainLm : public StepModel {
  public:
    explicit ChainLm(int capacity) : capacity_(capacity) {}

    void forward_step(const std::vector<TokenId>& tokens, const std::vector<int32_t>& positions,
                      const uint8_t* mask, const std::vector<int32_t>& out_rows,
                      const std::vector<int32_t>& exact_rows, const std::vector<int32_t>&,
                      std::vector<TokenId>* out, TokenSampler* sampler) override {
        (void)exact_rows;
        const int T = static_cast<int>(tokens.size());
        ++num_forward_;
        ASSERT_LE(static_cast<int>(cache_.size()) + T, capacity_);
        step_tokens_ = tokens;
        step_positions_ = positions;
        out->clear();
        std::vector<std::pair<int32_t, TokenId>> visible;
        std::vector<float> logits(kVocab);
        for (int32_t q : out_rows) {
            visible.clear();
            for (int k = 0; k < T; ++k) {
                if (mask != nullptr ? mask[q * T + k] != 0 : k <= q)
                    visible.emplace_back(positions[k], tokens[k]);
            }
            std::sort(visible.begin(), visible.end());
            uint64_t h = 1469598103934665603ull;
            for (TokenId t : cache_) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
            for (size_t i = 0; i < visible.size(); ++i) {
                ASSERT_EQ(visible[i].first, static_cast<int>(cache_.size() + i)) << "row " << q;
                h = (h ^ static_cast<uint64_t>(visible[i].second)) * 1099511628211ull;
            }
            const TokenId last = visible.back().second;
            const TokenId chain = static_cast<TokenId>((last * 5 + 3) % kVocab);
            for (int v = 0; v < kVocab; ++v) {
                const uint64_t z =
                    (h ^ static_cast<uint64_t>(v) * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
                logits[v] = static_cast<float>((z >> 40) & 0xFFFF) / 65536.0f * 2.0f;
            }
            logits[chain] += 6.5f;
            out->push_back(
                sampler ? sampler->sample(logits.data(), kVocab, positions[q] + 1)
                        : static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) -
                                               logits.begin()));
        }
    }
    void commit(const std::vector<int32_t>& src_rows) override {
        for (size_t i = 0; i < src_rows.size(); ++i) {
            ASSERT_EQ(step_positions_[src_rows[i]], static_cast<int>(cache_.size()));
            cache_.push_back(step_tokens_[src_rows[i]]);
        }
    }
    int kv_len() const override { return static_cast<int>(cache_.size()); }
    int kv_capacity() const override { return capacity_; }
    void truncate(int rows) override {
        ASSERT_LE(rows, static_cast<int>(cache_.size()));
        cache_.resize(rows);
    }
    const Tokens& cache() const { return cache_; }
    int num_forward() const { return num_forward_; }

  private:
    int capacity_;
    Tokens cache_;
    Tokens step_tokens_;
    std::vector<int32_t> step_positions_;
    int num_forward_ = 0;
};

GenerationConfig sampling(uint64_t seed, double temperature = 1.0, int top_k = 0,
                          double top_p = 1.0) {
    return sampling_config(temperature, top_k, top_p, seed);
}

std::optional<LookaheadConfig> lookahead(int W, int N, int G) {
    LookaheadConfig c;
    c.window_size = W;
    c.ngram_size = N;
    c.verification_set_size = G;
    return c;
}

GenerationResult run(ChainLm& lm, const Tokens& prompt, const GenerationConfig& g,
                     const std::optional<LookaheadConfig>& la, int max_new = 96,
                     const std::function<StreamControl(const Tokens&)>& cb = nullptr) {
    DecodeRequest r;
    r.prompt = prompt;
    r.max_new_tokens = max_new;
    r.lookahead = la;
    r.sampling = g;
    return run_decode(lm, r, cb);
}

// The contract: for a seed, the sampled tokens do not depend on lookahead or its (W, N, G).
TEST(SampledDecode, LookaheadEqualsPlainSamplingForEverySeedAndConfig) {
    const Tokens prompt = {1, 8, 43, 24, 27, 42, 19, 2, 13, 20};
    int64_t multi_token_steps = 0;
    const GenerationConfig filters[] = {sampling(0), sampling(0, 0.7), sampling(0, 1.0, 5),
                                        sampling(0, 1.3, 0, 0.9), sampling(0, 1.0, 8, 0.8)};
    for (GenerationConfig g : filters) {
        for (uint64_t seed = 1; seed <= 6; ++seed) {
            g.seed = seed;
            ChainLm plain_lm(1024);
            const GenerationResult plain = run(plain_lm, prompt, g, std::nullopt);
            ASSERT_EQ(plain.token_ids.size(), 96u);
            for (auto [W, N, G] : {std::tuple{1, 2, 1}, std::tuple{3, 3, 3}, std::tuple{4, 5, 2},
                                   std::tuple{2, 4, 0}, std::tuple{6, 3, 6}, std::tuple{0, 4, 3}}) {
                ChainLm lm(1024);
                const GenerationResult la = run(lm, prompt, g, lookahead(W, N, G));
                ASSERT_EQ(la.token_ids, plain.token_ids)
                    << "seed " << seed << " T " << g.temperature << " top_k " << g.top_k
                    << " top_p " << g.top_p << " W,N,G " << W << "," << N << "," << G;
                EXPECT_LE(la.stats.steps, plain.stats.steps);
                for (size_t k = 2; k < la.stats.accept_histogram.size(); ++k) {
                    multi_token_steps += la.stats.accept_histogram[k];
                }
            }
        }
    }
    // Lookahead did accept candidates under sampling (the comparison is not vacuous).
    EXPECT_GT(multi_token_steps, 500);
}

// The same contract for the draft tree, each source alone and all together.
TEST(SampledDecode, TreeLookaheadEqualsPlainSampling) {
    const Tokens prompt = {1, 8, 43, 24, 27, 42, 19, 2, 13, 20};
    int64_t multi_token_steps = 0;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
        const GenerationConfig g = sampling(seed, seed % 2 ? 0.8 : 1.2, seed % 3 ? 0 : 6);
        ChainLm plain_lm(1024);
        const GenerationResult plain = run(plain_lm, prompt, g, std::nullopt);
        for (auto [W, G, R, S, K] : {std::tuple{0, 4, 8, 0, 0}, std::tuple{0, 0, 8, 3, 0},
                                     std::tuple{0, 0, 12, 0, 4}, std::tuple{3, 3, 16, 2, 3}}) {
            std::optional<LookaheadConfig> c = lookahead(W, 4, G);
            c->tree_rows = R;
            c->suffix_branches = S;
            c->recycle_top_k = K;
            ChainLm lm(1024);
            const GenerationResult la = run(lm, prompt, g, c);
            ASSERT_EQ(la.token_ids, plain.token_ids) << "seed " << seed << " W,G,R,S,K " << W << ","
                                                     << G << "," << R << "," << S << "," << K;
            for (size_t k = 2; k < la.stats.accept_histogram.size(); ++k) {
                multi_token_steps += la.stats.accept_histogram[k];
            }
        }
    }
    EXPECT_GT(multi_token_steps, 100);
}

TEST(SampledDecode, DifferentSeedsGiveDifferentText) {
    const Tokens prompt = {1, 2, 3};
    ChainLm a(512), b(512);
    EXPECT_NE(run(a, prompt, sampling(1, 1.5), std::nullopt).token_ids,
              run(b, prompt, sampling(2, 1.5), std::nullopt).token_ids);
}

// A callback stop that keeps only part of a multi-token chunk ends exactly where plain decoding
// stopped by the same rule ends, and the cache holds exactly prompt + output minus its last token.
TEST(SampledDecode, CallbackStopInsideAChunkTruncatesExactly) {
    const Tokens prompt = {5, 28, 47, 9, 1, 8};
    for (int stop_at : {1, 2, 7, 30, 61}) {
        // Stop after the stop_at-th emitted token, wherever it falls in a chunk.
        auto make_cb = [stop_at](int* seen) {
            return [stop_at, seen](const Tokens& chunk) -> StreamControl {
                const int before = *seen;
                *seen += static_cast<int>(chunk.size());
                if (*seen >= stop_at) return StreamControl::stop_after(stop_at - before);
                return true;
            };
        };
        int seen_plain = 0, seen_la = 0;
        ChainLm plain_lm(1024), lm(1024);
        const GenerationResult plain =
            run(plain_lm, prompt, sampling(3), std::nullopt, 96, make_cb(&seen_plain));
        const GenerationResult la =
            run(lm, prompt, sampling(3), lookahead(5, 4, 5), 96, make_cb(&seen_la));
        ASSERT_EQ(plain.token_ids.size(), static_cast<size_t>(stop_at));
        EXPECT_EQ(la.token_ids, plain.token_ids) << "stop_at " << stop_at;
        EXPECT_EQ(la.stop_reason, StopReason::kCallback);
        Tokens expected_cache = prompt;
        expected_cache.insert(expected_cache.end(), la.token_ids.begin(), la.token_ids.end() - 1);
        EXPECT_EQ(lm.cache(), expected_cache);
        EXPECT_EQ(plain_lm.cache(), expected_cache);
    }
}

TEST(SampledDecode, CallbackKeepOutOfRangeIsAConfigError) {
    ChainLm lm(256);
    EXPECT_THROW(run(lm, {1, 2}, sampling(1), std::nullopt, 8,
                     [](const Tokens&) { return StreamControl::stop_after(5); }),
                 ConfigError);
}

// Reusing the cached rows of a common prefix gives the output of a fresh run of the full prompt
// (ChainLm is an exact function of its context) and prefills only the new tokens.
TEST(SampledDecode, ReusedCachePrefixEqualsAFreshRun) {
    const Tokens turn1 = {4, 17, 33, 2, 9};
    for (auto la : {std::optional<LookaheadConfig>{}, lookahead(4, 4, 4)}) {
        ChainLm lm(1024);
        const GenerationResult first = run(lm, turn1, sampling(11), la, 40);
        Tokens turn2 = turn1;
        turn2.insert(turn2.end(), first.token_ids.begin(), first.token_ids.end());
        turn2.insert(turn2.end(), {7, 7, 30});
        DecodeRequest r;
        r.prompt = turn2;
        r.max_new_tokens = 40;
        r.lookahead = la;
        r.sampling = sampling(11);
        r.reuse_rows = static_cast<int>(turn1.size() + first.token_ids.size() - 1);
        ASSERT_EQ(lm.kv_len(), r.reuse_rows);
        const GenerationResult second = run_decode(lm, r, nullptr);
        EXPECT_EQ(second.stats.reused_tokens, r.reuse_rows);
        EXPECT_EQ(second.stats.prompt_tokens, 4);
        ChainLm fresh_lm(1024);
        EXPECT_EQ(second.token_ids, run(fresh_lm, turn2, sampling(11), la, 40).token_ids);
    }
}

TEST(SampledDecode, ReuseRowsMustLeaveAPromptTokenToRun) {
    ChainLm lm(256);
    DecodeRequest r;
    r.prompt = {1, 2, 3};
    r.reuse_rows = 3;
    EXPECT_THROW(run_decode(lm, r, nullptr), InternalError);  // an invariant Session::run keeps
}

// keep_pool: a second generation starts from the first one's n-grams (and gets more accepted
// tokens per step on the same text); without it the pool starts empty.
TEST(SampledDecode, KeptPoolCarriesOverAndIsReshapedForAnotherN) {
    const Tokens prompt = {3, 6, 9, 12};
    auto pool = std::make_shared<SharedPool>();
    auto go = [&](bool keep, std::optional<LookaheadConfig> la) {
        ChainLm lm(1024);
        DecodeRequest r;
        r.prompt = prompt;
        r.max_new_tokens = 80;
        r.lookahead = la;
        r.sampling = sampling(5, 0.8);
        r.pool = pool;
        r.keep_pool = keep;
        return run_decode(lm, r, nullptr);
    };
    const GenerationResult first = go(false, lookahead(4, 4, 4));
    const int64_t size_after_first = pool->size();
    EXPECT_GT(size_after_first, 0);
    const GenerationResult again = go(true, lookahead(4, 4, 4));
    EXPECT_EQ(again.token_ids, first.token_ids);
    EXPECT_LT(again.stats.steps, first.stats.steps);  // the kept n-grams verify at once
    EXPECT_GE(pool->size(), size_after_first);
    const GenerationResult shorter = go(true, lookahead(4, 3, 4));  // reshaped to N = 3
    EXPECT_EQ(shorter.token_ids, first.token_ids);
    EXPECT_EQ(pool->snapshot().first.ngram_len(), 2);
    // A larger N than the pool's: rebuilt from the texts of the runs so far (cutting the 2-token
    // entries could not give 4), so the kept text still verifies at once.
    EXPECT_EQ(pool->texts().size(), 3u);
    const GenerationResult longer = go(true, lookahead(4, 5, 4));
    EXPECT_EQ(longer.token_ids, first.token_ids);
    EXPECT_EQ(pool->snapshot().first.ngram_len(), 4);
    const GenerationResult cold = go(false, lookahead(4, 5, 4));
    EXPECT_EQ(cold.token_ids, first.token_ids);
    EXPECT_LT(longer.stats.steps, cold.stats.steps);
    EXPECT_EQ(pool->texts().size(), 1u);  // not kept: the texts went with the pool
    go(false, lookahead(1, 2, 1));        // not kept: starts empty
    EXPECT_LE(pool->size(), 81 + 4);
}

// Calibration runs its dummy rows after the cached context and leaves that context in place, so a
// conversation's next turn can still reuse it; without room after it, the cache is emptied.
TEST(Calibration, KeepsTheCachedContextWhenThereIsRoom) {
    ChainLm lm(1024);
    run(lm, {4, 17, 33, 2, 9}, sampling(1), lookahead(2, 3, 2), 30);
    const Tokens cached = lm.cache();
    ASSERT_EQ(cached.size(), 5u + 29u);
    CalibrationOptions options;
    options.vocab_size = kVocab;
    const std::vector<StepCost> table = calibrate_step_costs(lm, options);
    ASSERT_FALSE(table.empty());
    EXPECT_EQ(table.front().tokens, 1);
    EXPECT_EQ(lm.cache(), cached);

    ChainLm full(cached.size() + 100);  // fewer than 128 free rows after the context
    run(full, {4, 17, 33, 2, 9}, sampling(1), lookahead(2, 3, 2), 30);
    calibrate_step_costs(full, options);
    EXPECT_EQ(full.kv_len(), 0);
}

// Greedy callback stop on the oracle text: same rule, token for token.
TEST(GreedyDecode, CallbackStopAfterKeepsAPrefixOfTheOracle) {
    const Tokens text = mixed_text(400, 21);
    for (int stop_at : {3, 17, 40}) {
        OracleLm lm(text, 64, 1024);
        DecodeRequest r;
        r.prompt.assign(text.begin(), text.begin() + 100);
        r.max_new_tokens = 64;
        r.lookahead = lookahead(4, 5, 4);
        int seen = 0;
        const GenerationResult g = run_decode(lm, r, [&](const Tokens& chunk) -> StreamControl {
            const int before = seen;
            seen += static_cast<int>(chunk.size());
            return seen >= stop_at ? StreamControl::stop_after(stop_at - before)
                                   : StreamControl(true);
        });
        ASSERT_EQ(g.token_ids.size(), static_cast<size_t>(stop_at));
        EXPECT_TRUE(std::equal(g.token_ids.begin(), g.token_ids.end(), text.begin() + 100));
        EXPECT_EQ(lm.kv_len(), 100 + stop_at - 1);
    }
}

}  // namespace
}  // namespace pylookahead
