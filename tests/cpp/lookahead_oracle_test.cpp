// Lookahead decoding against an oracle LM (oracle_lm.h): the output must be the oracle text, and
// the same as plain greedy decoding, token for token, for every (W, N, G).
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "lookahead/decode_loop.h"
#include "oracle_lm.h"
#include "oracle_text.h"
#include "pylookahead/errors.h"

namespace pylookahead {
namespace {

using Tokens = std::vector<TokenId>;
constexpr int kVocab = 64;

LookaheadConfig config_of(int W, int N, int G, bool seed_from_prompt = true) {
    LookaheadConfig c;
    c.window_size = W;
    c.ngram_size = N;
    c.verification_set_size = G;
    c.seed_from_prompt = seed_from_prompt;
    c.seed = 7;
    return c;
}

struct Decoded {
    GenerationResult result;
    std::vector<Tokens> chunks;  // what on_tokens received, per call
};

Decoded decode(const Tokens& text, int prompt_len, int max_new_tokens,
               const std::optional<LookaheadConfig>& lookahead, const Tokens& end_ids = {},
               int capacity = 4096) {
    OracleLm lm(text, kVocab, capacity);
    DecodeRequest request;
    request.prompt.assign(text.begin(), text.begin() + prompt_len);
    request.max_new_tokens = max_new_tokens;
    request.end_ids = end_ids;
    request.lookahead = lookahead;
    Decoded run;
    run.result = run_decode(lm, request, [&](const Tokens& chunk) {
        run.chunks.push_back(chunk);
        return true;
    });
    EXPECT_EQ(lm.num_forward(), 1 + run.result.stats.steps);
    return run;
}

// Counters that must agree with the tokens whatever the configuration.
void check_stats(const Decoded& run, int max_accept) {
    const GenerationStats& s = run.result.stats;
    EXPECT_EQ(s.new_tokens, static_cast<int64_t>(run.result.token_ids.size()));
    ASSERT_EQ(s.accept_histogram.size(), static_cast<size_t>(max_accept + 1));
    EXPECT_EQ(s.accept_histogram[0], 0);
    expect_histogram_adds_up(s);
    EXPECT_EQ(s.step_times_s.size(), static_cast<size_t>(s.steps));
    EXPECT_LE(s.accepted_from_prompt + s.accepted_from_window, s.steps);
    EXPECT_EQ(run.chunks.size(), static_cast<size_t>(s.steps + 1));
    Tokens joined;
    for (const Tokens& c : run.chunks) joined.insert(joined.end(), c.begin(), c.end());
    EXPECT_EQ(joined, run.result.token_ids);
}

class LookaheadOracle : public ::testing::TestWithParam<std::tuple<int, int, int>> {
  protected:
    void check_text(const Tokens& text, int prompt_len, bool seed_from_prompt) {
        const auto [W, N, G] = GetParam();
        const LookaheadConfig config = config_of(W, N, G, seed_from_prompt);
        const int max_new = static_cast<int>(text.size()) - prompt_len - 8;
        const Tokens want = expected(text, prompt_len, max_new, {});
        const Decoded greedy = decode(text, prompt_len, max_new, std::nullopt);
        const Decoded look = decode(text, prompt_len, max_new, config);
        EXPECT_EQ(greedy.result.token_ids, want);
        EXPECT_EQ(look.result.token_ids, want);
        EXPECT_EQ(look.result.stop_reason, StopReason::kMaxNewTokens);
        EXPECT_EQ(greedy.result.stats.steps, max_new - 1);
        check_stats(greedy, 1);
        check_stats(look, N);
        if (G == 0) EXPECT_EQ(look.result.stats.pool_size, 0);
        if (G == 0) EXPECT_EQ(look.result.stats.steps, max_new - 1);

        // Every cut by max_new_tokens and by an end id: exact, never longer, end id included.
        for (int m = 1; m <= 30; ++m) {
            const Decoded r = decode(text, prompt_len, m, config);
            EXPECT_EQ(r.result.token_ids, expected(text, prompt_len, m, {}))
                << "max_new_tokens " << m;
            check_stats(r, N);
        }
        for (int i = 0; i < 30; ++i) {
            const Tokens ends = {text[prompt_len + i]};
            const Decoded r = decode(text, prompt_len, max_new, config, ends);
            EXPECT_EQ(r.result.token_ids, expected(text, prompt_len, max_new, ends))
                << "end id " << ends[0];
            EXPECT_EQ(r.result.stop_reason, StopReason::kEndToken);
            check_stats(r, N);
        }
    }
};

TEST_P(LookaheadOracle, MixedTextEqualsGreedy) {
    check_text(mixed_text(220, 1), 60, true);
    check_text(mixed_text(220, 2), 17, false);
}

TEST_P(LookaheadOracle, PeriodicTextEqualsGreedyAndCompresses) {
    const auto [W, N, G] = GetParam();
    const Tokens text = periodic_text(150);
    check_text(text, 20, true);
    if (G == 0) return;
    const int max_new = 120;
    const Decoded r = decode(text, 20, max_new, config_of(W, N, G));
    EXPECT_EQ(r.result.token_ids, expected(text, 20, max_new, {}));
    // Every n-gram of the continuation is in the prompt, so a step emits N tokens (N - 1
    // accepted + bonus) unless harvested window n-grams evicted the seeded one (small G).
    const int64_t ideal = (max_new - 1 + N - 1) / N;
    EXPECT_GE(r.result.stats.steps, ideal);
    EXPECT_LE(r.result.stats.steps, ideal + ideal / 5);
    EXPECT_GE(r.result.stats.accepted_from_prompt, r.result.stats.steps * 4 / 5);
    EXPECT_GT(r.result.stats.compression(), 1.0);
    check_text(text, 3, false);  // from the window alone
}

INSTANTIATE_TEST_SUITE_P(Grid, LookaheadOracle,
                         ::testing::Values(std::make_tuple(0, 2, 1), std::make_tuple(0, 3, 2),
                                           std::make_tuple(0, 5, 4), std::make_tuple(0, 4, 16),
                                           std::make_tuple(1, 2, 1), std::make_tuple(1, 2, 0),
                                           std::make_tuple(1, 3, 1), std::make_tuple(1, 5, 3),
                                           std::make_tuple(2, 2, 2), std::make_tuple(3, 3, 2),
                                           std::make_tuple(3, 3, 0), std::make_tuple(4, 4, 4),
                                           std::make_tuple(5, 4, 2), std::make_tuple(7, 3, 1),
                                           std::make_tuple(2, 6, 5), std::make_tuple(8, 5, 0),
                                           std::make_tuple(15, 5, 15), std::make_tuple(32, 2, 64),
                                           std::make_tuple(20, 8, 20), std::make_tuple(64, 4, 64)),
                         [](const auto& info) {
                             return "W" + std::to_string(std::get<0>(info.param)) + "N" +
                                    std::to_string(std::get<1>(info.param)) + "G" +
                                    std::to_string(std::get<2>(info.param));
                         });

// The first candidate for the key matches 2 of its 3 tokens, the second one all 3.
TEST(LookaheadOracleCases, LongestCandidateWinsOverAPartialOne) {
    //                  prompt: 0  1  2  3  4  5  6  7  8  9 10 11 | continuation
    const Tokens text = {5, 1, 2, 3, 4, 6, 1, 2, 3, 7, 8, 6, 1, 2, 3, 7, 9, 10, 11, 12, 13};
    const Decoded r = decode(text, 12, 8, config_of(1, 4, 2));
    EXPECT_EQ(r.result.token_ids, expected(text, 12, 8, {}));
    ASSERT_GE(r.chunks.size(), 2u);
    EXPECT_EQ(r.chunks[0], (Tokens{1}));           // prefill
    EXPECT_EQ(r.chunks[1], (Tokens{2, 3, 7, 9}));  // (2 3 7) accepted + bonus 9
    EXPECT_EQ(r.result.stats.accepted_from_prompt, 1);
}

TEST(LookaheadOracleCases, PartialMatchEndsWithTheCorrection) {
    const Tokens text = {5, 1, 2, 3, 4, 6, 1, 2, 3, 7, 8, 9, 10, 11, 12, 13};
    const Decoded r = decode(text, 6, 8, config_of(1, 4, 1));
    EXPECT_EQ(r.result.token_ids, expected(text, 6, 8, {}));
    ASSERT_GE(r.chunks.size(), 2u);
    EXPECT_EQ(r.chunks[1], (Tokens{2, 3, 7}));  // (2 3 4): 2 3 accepted, 7 corrects 4
    EXPECT_EQ(r.result.stats.accept_histogram[3], 1);
}

TEST(LookaheadOracleCases, EndIdInsideAnAcceptedRunIsKeptAndCuts) {
    const Tokens text = periodic_text(60);  // 30 31 32 33 34 35 36 30 ...
    // Prefill gives 30 (position 14); step 1 accepts (31 32 33) + bonus 34, cut at 32.
    const Decoded r = decode(text, 14, 40, config_of(2, 4, 2), {32, 99});
    EXPECT_EQ(r.result.token_ids, (Tokens{30, 31, 32}));
    EXPECT_EQ(r.result.stop_reason, StopReason::kEndToken);
    EXPECT_EQ(r.result.stats.steps, 1);
    EXPECT_EQ(r.result.stats.accept_histogram[2], 1);
}

TEST(LookaheadOracleCases, MaxNewTokensInsideAnAcceptedRunCuts) {
    const Tokens text = periodic_text(60);
    const Decoded r = decode(text, 14, 3, config_of(2, 4, 2));
    EXPECT_EQ(r.result.token_ids, (Tokens{30, 31, 32}));
    EXPECT_EQ(r.result.stop_reason, StopReason::kMaxNewTokens);
    EXPECT_EQ(r.chunks, (std::vector<Tokens>{{30}, {31, 32}}));
}

TEST(LookaheadOracleCases, FirstTokenCanEndGeneration) {
    const Tokens text = periodic_text(60);
    const Decoded r = decode(text, 14, 10, config_of(2, 4, 2), {30});
    EXPECT_EQ(r.result.token_ids, (Tokens{30}));
    EXPECT_EQ(r.result.stop_reason, StopReason::kEndToken);
    EXPECT_EQ(r.result.stats.steps, 0);
    const Decoded g = decode(text, 14, 1, std::nullopt);
    EXPECT_EQ(g.result.token_ids, (Tokens{30}));
    EXPECT_EQ(g.result.stop_reason, StopReason::kMaxNewTokens);
}

TEST(LookaheadOracleCases, CallbackReturningFalseStopsAfterThatStep) {
    const Tokens text = periodic_text(80);
    for (const std::optional<LookaheadConfig>& la :
         {std::optional<LookaheadConfig>(), std::optional<LookaheadConfig>(config_of(3, 3, 3))}) {
        OracleLm lm(text, kVocab, 4096);
        DecodeRequest request;
        request.prompt.assign(text.begin(), text.begin() + 20);
        request.max_new_tokens = 50;
        request.lookahead = la;
        int calls = 0;
        Tokens seen;
        const GenerationResult r = run_decode(lm, request, [&](const Tokens& chunk) {
            seen.insert(seen.end(), chunk.begin(), chunk.end());
            return ++calls < 3;
        });
        EXPECT_EQ(r.stop_reason, StopReason::kCallback);
        EXPECT_EQ(calls, 3);
        EXPECT_EQ(r.stats.steps, 2);
        EXPECT_EQ(r.token_ids, seen);
        EXPECT_EQ(r.token_ids, expected(text, 20, static_cast<int>(seen.size()), {}));
    }
}

TEST(LookaheadOracleCases, WindowHarvestAloneFindsRepeats) {
    const Tokens text = periodic_text(300);
    const Decoded r = decode(text, 3, 250, config_of(5, 3, 5, /*seed_from_prompt=*/false));
    EXPECT_EQ(r.result.token_ids, expected(text, 3, 250, {}));
    EXPECT_GT(r.result.stats.accepted_from_window, 0);
    EXPECT_EQ(r.result.stats.accepted_from_prompt, 0);
    EXPECT_LT(r.result.stats.steps, 249);
}

// The loop's invariants: Session::generate validates users' requests (ConfigError, tested through
// the public API in tests/python); a request that slips past it fails a check, never runs.
TEST(LookaheadOracleCases, CapacityTooSmallFailsTheLoopsCheck) {
    const Tokens text = periodic_text(60);
    const LookaheadConfig config = config_of(4, 4, 4);  // T = 24
    try {
        decode(text, 10, 20, config, {}, /*capacity=*/10 + 20 + 23);
        FAIL() << "expected InternalError";
    } catch (const InternalError& e) {
        EXPECT_NE(std::string(e.what()).find("kv_capacity"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(decode(text, 10, 20, config, {}, /*capacity=*/10 + 20 + 24));
    EXPECT_THROW(decode(text, 10, 20, std::nullopt, {}, /*capacity=*/10 + 20), InternalError);
    EXPECT_NO_THROW(decode(text, 10, 20, std::nullopt, {}, /*capacity=*/10 + 20 + 1));
}

TEST(LookaheadOracleCases, BadRequestsFailTheLoopsChecks) {
    const Tokens text = periodic_text(60);
    EXPECT_THROW(decode(text, 0, 5, std::nullopt), InternalError);  // empty prompt
    EXPECT_THROW(decode(text, 10, 0, std::nullopt), InternalError);
    EXPECT_THROW(decode(text, 10, 5, config_of(-1, 3, 1)), InternalError);
    EXPECT_THROW(decode(text, 10, 5, config_of(0, 3, 0)), InternalError);  // W = 0 needs G >= 1
    EXPECT_THROW(decode(text, 10, 5, config_of(2, 1, 1)), InternalError);
}

}  // namespace
}  // namespace pylookahead
