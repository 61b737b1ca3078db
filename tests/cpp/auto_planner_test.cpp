// The automatic lookahead planner (lookahead/auto/): the expected-tokens formula, the
// acceptance fit, the cost table, the choice of a config and the controller's switching rules.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "lookahead/auto/controller.h"
#include "lookahead/decode_loop.h"
#include "oracle_lm.h"
#include "oracle_text.h"
#include "pylookahead/errors.h"

namespace pylookahead {
namespace {

std::vector<StepCost> table_of(double greedy, double (*per_token)(int)) {
    std::vector<StepCost> t;
    for (int T : {1, 4, 8, 16, 32, 64}) t.push_back({T, greedy * per_token(T)});
    return t;
}
double flat(int) { return 1.0; }                         // wide steps are free
double linear(int T) { return static_cast<double>(T); }  // cost(T) = T * cost(1)
double mild(int T) { return 1.0 + 0.02 * T; }            // a memory-bound device

// History observations of text whose n-grams always recur: `count` candidates, best matches all.
void feed_history(AcceptanceModel* m, int n, int count, int gamma, int matched) {
    for (int i = 0; i < n; ++i) m->observe_history(count, gamma, matched);
}

TEST(ExpectedStepTokens, Limits) {
    for (int gamma = 1; gamma <= 6; ++gamma) {
        EXPECT_DOUBLE_EQ(expected_step_tokens(gamma, 3, 0.0, 0, 0.0), 1.0);
        EXPECT_DOUBLE_EQ(expected_step_tokens(gamma, 3, 1.0, 0, 0.0), gamma + 1.0);
        EXPECT_DOUBLE_EQ(expected_step_tokens(gamma, 0, 0.9, 0, 0.9), 1.0);  // no candidates
        // b = 1: the speculative decoding formula (1 - a^(gamma+1)) / (1 - a).
        for (double a : {0.1, 0.5, 0.8}) {
            EXPECT_NEAR(expected_step_tokens(gamma, 1, a, 0, 0.0),
                        (1 - std::pow(a, gamma + 1)) / (1 - a), 1e-12);
        }
    }
    // Two groups with the same rate are one group of b_h + b_w.
    EXPECT_NEAR(expected_step_tokens(4, 2, 0.4, 3, 0.4), expected_step_tokens(4, 5, 0.4, 0, 0.0),
                1e-12);
}

TEST(ExpectedStepTokens, Monotonic) {
    for (int gamma = 1; gamma <= 5; ++gamma) {
        double prev_a = 0.0;
        for (double a = 0.05; a <= 1.0; a += 0.05) {
            const double e = expected_step_tokens(gamma, 2, a, 0, 0.0);
            EXPECT_GE(e, prev_a);
            prev_a = e;
            EXPECT_LE(e, expected_step_tokens(gamma, 4, a, 0, 0.0));      // more candidates
            EXPECT_LE(e, expected_step_tokens(gamma + 1, 2, a, 0, 0.0));  // longer ones
        }
    }
}

TEST(AlphaFit, RecoversTheRateOfSimulatedCandidates) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> u(0, 1);
    for (double alpha : {0.2, 0.5, 0.8}) {
        AlphaFit fit(0.3, 8.0, 1e9);
        for (int i = 0; i < 4000; ++i) {
            const int b = 1 + i % 4, gamma = 2 + i % 3;
            int best = 0;
            for (int c = 0; c < b; ++c) {
                int m = 0;
                while (m < gamma && u(rng) < alpha) ++m;
                best = std::max(best, m);
            }
            fit.observe(b, gamma, best, 1.0);
        }
        EXPECT_NEAR(fit.alpha(), alpha, 0.03) << alpha;
    }
}

TEST(AlphaFit, PriorThenDataAndCappedWeight) {
    AlphaFit fit(0.3, 8.0, 64.0);
    EXPECT_DOUBLE_EQ(fit.alpha(), 0.3);
    for (int i = 0; i < 1000; ++i) fit.observe(2, 3, 0, 1.0);  // nothing ever matches
    EXPECT_DOUBLE_EQ(fit.weight(), 64.0);
    EXPECT_NEAR(fit.alpha(), 0.3 * 8 / 72, 1e-9);
    for (int i = 0; i < 1000; ++i) fit.observe(2, 3, 3, 1.0);  // now everything does: old fades
    EXPECT_GT(fit.alpha(), 0.85);
}

TEST(StepCostModel, InterpolatesExtrapolatesAndValidates) {
    StepCostModel m;
    m.set_table({{8, 3.0}, {1, 1.0}, {4, 2.0}});  // sorted on entry
    EXPECT_EQ(m.max_tokens(), 8);
    EXPECT_DOUBLE_EQ(m.table_seconds(1), 1.0);
    EXPECT_NEAR(m.table_seconds(2), 1.0 + 1.0 / 3, 1e-12);
    EXPECT_DOUBLE_EQ(m.table_seconds(6), 2.5);
    EXPECT_DOUBLE_EQ(m.table_seconds(12), 4.0);  // slope of the last segment
    EXPECT_DOUBLE_EQ(m.seconds(4), 2.0);
    EXPECT_THROW(m.set_table({}), ConfigError);
    EXPECT_THROW(m.set_table({{2, 1.0}}), ConfigError);            // no greedy point
    EXPECT_THROW(m.set_table({{1, 1.0}, {1, 2.0}}), ConfigError);  // duplicate
    EXPECT_THROW(m.set_table({{1, 0.0}}), ConfigError);            // not > 0
    EXPECT_THROW(m.set_table({{1, NAN}}), ConfigError);
}

TEST(StepCostModel, MeasuredStepsOverrideAndGreedyScalesTheRest) {
    StepCostModel m;
    m.set_table({{1, 1.0}, {16, 2.0}, {64, 4.0}});
    m.observe(16, 9.0);
    m.observe(16, 9.0);
    EXPECT_DOUBLE_EQ(m.seconds(16), 2.0);  // two samples are not enough
    m.observe(16, 9.0);
    EXPECT_DOUBLE_EQ(m.seconds(16), 9.0);
    EXPECT_DOUBLE_EQ(m.seconds(64), 4.0);  // lookahead measurements do not rescale the table
    EXPECT_DOUBLE_EQ(m.drift(), 1.0);
    for (int i = 0; i < 5; ++i) m.observe(1, 0.5);  // greedy steps run twice as fast
    EXPECT_DOUBLE_EQ(m.drift(), 0.5);
    EXPECT_DOUBLE_EQ(m.seconds(1), 0.5);
    EXPECT_DOUBLE_EQ(m.seconds(64), 2.0);
    EXPECT_DOUBLE_EQ(m.seconds(16), 9.0);
}

TEST(AutoPlanner, CheapWideStepsAndHighAcceptancePickLookahead) {
    AutoPlanner p;
    p.costs().set_table(table_of(0.01, flat));
    feed_history(&p.acceptance(), 400, 4, 5, 5);
    EXPECT_GT(p.acceptance().alpha_history(), 0.9);
    EXPECT_GT(p.acceptance().history_hit_rate(), 0.9);
    const PlanChoice c = p.plan(64, 0.05);
    ASSERT_TRUE(c.config.has_value());
    EXPECT_NO_THROW(c.config->validate());
    EXPECT_LE(c.config->tokens_per_step(), 64);
    EXPECT_GE(c.config->ngram_size, 5);  // long n-grams pay when everything matches
    EXPECT_GT(c.expected_tokens, 3.0);
    EXPECT_GT(c.speedup, 3.0);
}

TEST(AutoPlanner, ExpensiveWideStepsPickGreedy) {
    AutoPlanner p;
    p.costs().set_table(table_of(0.01, linear));
    feed_history(&p.acceptance(), 400, 4, 5, 5);  // even when every candidate matches
    const PlanChoice c = p.plan(64, 0.05);
    EXPECT_FALSE(c.config.has_value());
    EXPECT_DOUBLE_EQ(c.speedup, 1.0);
}

TEST(AutoPlanner, NoRepetitionPicksGreedyOnAModestDevice) {
    AutoPlanner p;
    p.costs().set_table(table_of(0.01, mild));
    feed_history(&p.acceptance(), 400, 0, 5, 0);  // no key ever has a candidate
    for (int i = 0; i < 200; ++i) p.acceptance().observe_window(4, 1, 3, 0);  // window guesses fail
    EXPECT_FALSE(p.plan(64, 0.05).config.has_value());
}

TEST(AutoPlanner, CapsAndMargin) {
    AutoPlanner p;
    p.costs().set_table(table_of(0.01, flat));
    feed_history(&p.acceptance(), 400, 4, 5, 5);
    for (int cap : {1, 2, 3, 4, 8, 12, 20, 40}) {
        const PlanChoice c = p.plan(cap, 0.05);
        if (cap < 2) {  // the smallest step with a candidate: W = 0, N = 2, G = 1 (T = 2)
            EXPECT_FALSE(c.config.has_value());
        } else {
            ASSERT_TRUE(c.config.has_value());
            EXPECT_LE(c.config->tokens_per_step(), cap);
        }
    }
    const PlanChoice best = p.plan(64, 0.0);
    ASSERT_TRUE(best.config.has_value());
    EXPECT_FALSE(p.plan(64, best.speedup).config.has_value());  // the margin is not reached
}

TEST(AutoPlanner, BestSpeedupIsMonotonic) {
    // More room (T cap), better acceptance or cheaper wide steps never lower the best speedup.
    double prev = 0.0;
    for (int cap : {4, 8, 16, 32, 64}) {
        AutoPlanner p;
        p.costs().set_table(table_of(0.01, mild));
        feed_history(&p.acceptance(), 200, 3, 5, 2);
        const double s = p.plan(cap, 0.0).speedup;
        EXPECT_GE(s, prev - 1e-12);
        prev = s;
    }
    prev = 0.0;
    for (int matched = 0; matched <= 5; ++matched) {
        AutoPlanner p;
        p.costs().set_table(table_of(0.01, mild));
        feed_history(&p.acceptance(), 300, 2, 5, matched);
        const double s = p.plan(64, 0.0).speedup;
        EXPECT_GE(s, prev - 1e-12) << matched;
        prev = s;
    }
    prev = 1e9;
    for (double slope : {0.0, 0.01, 0.05, 0.2, 1.0}) {
        AutoPlanner p;
        std::vector<StepCost> t;
        for (int T : {1, 4, 8, 16, 32, 64}) t.push_back({T, 0.01 * (1 + slope * (T - 1))});
        p.costs().set_table(t);
        feed_history(&p.acceptance(), 300, 2, 5, 3);
        const double s = p.plan(64, 0.0).speedup;
        EXPECT_LE(s, prev + 1e-12) << slope;
        prev = s;
    }
}

// A CPU-like device: wide steps cost (a greedy step + 8% per extra row). Text whose history
// n-grams recur: verification-only steps (W = 0) win, since they pay only for the candidates.
TEST(AutoPlanner, PrefersVerificationOnlyStepsWhenRowsAreCostly) {
    AutoPlanner p;
    std::vector<StepCost> t;
    for (int T : {1, 2, 4, 8, 16, 32, 64}) t.push_back({T, 0.01 * (1 + 0.08 * (T - 1))});
    p.costs().set_table(t);
    feed_history(&p.acceptance(), 400, 1, 5, 3);
    const PlanChoice best = p.plan(64, 0.0);
    ASSERT_TRUE(best.config.has_value());
    EXPECT_EQ(best.config->window_size, 0);
    EXPECT_GT(best.speedup, 1.3);
}

// Without candidates a verification-only step runs x alone: a greedy step's cost, unless the
// model keeps fixed shapes (then it pays for the padded slots too).
TEST(AutoPlanner, StepSecondsCountTheRowsThatRun) {
    AutoPlanner p;
    p.costs().set_table(table_of(0.01, linear));
    feed_history(&p.acceptance(), 2000, 0, 5, 0);  // the history never offers a candidate
    LookaheadConfig v;
    v.window_size = 0;
    v.ngram_size = 4;
    v.verification_set_size = 2;
    EXPECT_LT(p.acceptance().history_count_probability(0), 1.0);  // the prior keeps some hits
    EXPECT_GT(p.acceptance().history_count_probability(0), 0.99);
    EXPECT_NEAR(p.step_seconds(v), 0.01, 0.01 * 0.05);
    LookaheadConfig w = v;
    w.window_size = 2;  // window rows are paid every step: 2 * 3 rows at least
    EXPECT_GE(p.step_seconds(w), 0.06 - 1e-12);
    p.set_fixed_shapes(true);
    EXPECT_DOUBLE_EQ(p.step_seconds(v), p.costs().seconds(7));
    EXPECT_DOUBLE_EQ(p.step_seconds(w), p.costs().seconds(12));
    // Probabilities of the counts sum to 1.
    double sum = 0.0;
    for (int c = 0; c <= AcceptanceModel::kMaxCount; ++c) {
        sum += p.acceptance().history_count_probability(c);
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(AutoPlanner, RealizedTokensCorrectTheModel) {
    AutoPlanner p;
    p.costs().set_table(table_of(0.01, flat));
    feed_history(&p.acceptance(), 400, 4, 5, 5);
    LookaheadConfig c;
    c.window_size = 1;
    c.ngram_size = 6;
    c.verification_set_size = 1;
    const double model = p.expected_tokens(c);
    EXPECT_DOUBLE_EQ(model, p.model_tokens(c));
    EXPECT_DOUBLE_EQ(p.model_bias(), 1.0);
    LookaheadConfig other = c;
    other.ngram_size = 4;
    const double other_model = p.expected_tokens(other);
    for (int i = 0; i < 100; ++i) p.observe_lookahead_step(c, 1, model);
    EXPECT_LT(p.expected_tokens(c), 1.0 + (model - 1.0) * 0.2);
    // A model that over-predicted is trusted less for the other configs too.
    EXPECT_LT(p.model_bias(), 0.1);
    EXPECT_LT(p.expected_tokens(other), 1.0 + (other_model - 1.0) * 0.1);
}

TEST(HistoryShadow, PeriodicTextIsPredictableRandomTextIsNot) {
    std::vector<TokenId> periodic, random_text;
    for (int i = 0; i < 300; ++i) periodic.push_back(10 + i % 7);
    std::mt19937 rng(5);
    for (int i = 0; i < 300; ++i) random_text.push_back(static_cast<TokenId>(rng() % 100000));

    AcceptanceModel a;
    ReplayStats ra;
    HistoryShadow s;
    s.start({periodic.begin(), periodic.begin() + 20}, &a, &ra, 0.25);
    for (size_t i = 20; i < periodic.size(); ++i) s.push(periodic[i], &a, &ra);
    EXPECT_GT(a.history_hit_rate(), 0.9);
    EXPECT_GT(a.alpha_history(), 0.9);
    // Replayed verification-only steps accept all N - 1 candidate tokens plus the bonus.
    EXPECT_GT(ra.tokens_per_step(4, 2), 3.9);
    EXPECT_GT(ra.tokens_per_step(6, 1), 5.8);

    AcceptanceModel b;
    ReplayStats rb;
    HistoryShadow r;
    r.start({random_text.begin(), random_text.begin() + 20}, &b, &rb, 0.25);
    for (size_t i = 20; i < random_text.size(); ++i) r.push(random_text[i], &b, &rb);
    EXPECT_LT(b.history_hit_rate(), 0.1);
    EXPECT_LT(rb.tokens_per_step(4, 2), 1.1);
    const std::vector<double> counts = rb.candidate_counts(4, 2);
    ASSERT_EQ(counts.size(), 3u);
    EXPECT_GT(counts[0], 0.9 * rb.steps(4, 2));  // hardly any key has a candidate
}

TEST(ReplayStats, MeansAndCountsFadeAtTheCap) {
    ReplayStats r;
    EXPECT_EQ(r.steps(3, 2), 0.0);
    EXPECT_EQ(r.tokens_per_step(3, 2), 1.0);
    EXPECT_TRUE(r.candidate_counts(3, 2).empty());
    r.record(3, 2, 3, 2, 1.0);
    r.record(3, 2, 1, 0, 1.0);
    r.record(3, 2, 1, 1, 0.5);
    EXPECT_DOUBLE_EQ(r.steps(3, 2), 2.5);
    EXPECT_DOUBLE_EQ(r.tokens_per_step(3, 2), 4.5 / 2.5);
    EXPECT_EQ(r.candidate_counts(3, 2), (std::vector<double>{1.0, 0.5, 1.0}));
    for (int i = 0; i < 1000; ++i) r.record(3, 2, 2, 1, 1.0);
    EXPECT_DOUBLE_EQ(r.steps(3, 2), ReplayStats::kMaxSteps);
    EXPECT_NEAR(r.tokens_per_step(3, 2), 2.0, 1e-3);  // the old steps have faded
    EXPECT_EQ(r.steps(4, 2), 0.0);
}

// (N, G) of the verification-only configs whose replays are checked against real runs.
const std::vector<std::pair<int, int>> kReplayCases = {{2, 1}, {3, 2}, {4, 2}, {5, 4}, {6, 8}};

LookaheadConfig verification_only(int ngram_size, int verification_set_size) {
    LookaheadConfig config;
    config.window_size = 0;
    config.ngram_size = ngram_size;
    config.verification_set_size = verification_set_size;
    return config;
}

// The replay of a W = 0 config steps exactly as a real run of it does on the same text.
TEST(HistoryShadow, ReplayStepsLikeARealVerificationOnlyRun) {
    const std::vector<TokenId> text = mixed_text(400, 11);
    const int prompt_len = 120, max_new = 200;
    for (const auto& [n, g] : kReplayCases) {
        const LookaheadConfig config = verification_only(n, g);
        OracleLm lm(text, 64, 1024);
        DecodeRequest request;
        request.prompt.assign(text.begin(), text.begin() + prompt_len);
        request.max_new_tokens = max_new;
        request.lookahead = config;
        const GenerationResult real = run_decode(lm, request, nullptr);
        ASSERT_EQ(real.token_ids, std::vector<TokenId>(text.begin() + prompt_len,
                                                       text.begin() + prompt_len + max_new));

        // The real steps take keys in [prompt_len, prompt_len + max_new - 2]; the replay records
        // a step once its N - 1 candidate positions are known.
        AcceptanceModel model;
        ReplayStats replay;
        HistoryShadow shadow;
        shadow.start(request.prompt, &model, &replay, /*prompt_weight=*/0.0);
        for (int i = prompt_len; i < prompt_len + max_new - 2 + n; ++i) {
            shadow.push(text[i], &model, &replay);
        }
        EXPECT_EQ(replay.steps(n, g), static_cast<double>(real.stats.steps)) << n << "," << g;
        EXPECT_GT(real.stats.steps, 0);
    }
}

// Verification-only configs are judged by their replay on the session's text, not by the model:
// the replay's tokens per step and, on a CPU, the rows its steps actually ran.
// Under keep_pool the replay pools keep earlier generations' n-grams as the real pool does: the
// second of two calls sharing one pool replays the steps a real run takes on it. Its text repeats
// the first call's, so the kept n-grams matter: a shadow that starts empty replays more steps.
TEST(HistoryShadow, KeptPoolsReplayLikeARealRunThatKeepsItsPool) {
    const std::vector<TokenId> first_text = mixed_text(400, 11);
    const std::vector<TokenId> second_text(first_text.begin() + 60, first_text.end());
    const int prompt_len = 120, max_new = 200;
    for (const auto& [n, g] : kReplayCases) {
        const LookaheadConfig config = verification_only(n, g);
        auto pool = std::make_shared<SharedPool>();
        AcceptanceModel model;
        HistoryShadow shadow;
        std::vector<int64_t> real_steps;
        std::vector<double> replayed_steps;
        for (const std::vector<TokenId>* text : {&first_text, &second_text}) {
            OracleLm lm(*text, 64, 1024);
            DecodeRequest request;
            request.prompt.assign(text->begin(), text->begin() + prompt_len);
            request.max_new_tokens = max_new;
            request.lookahead = config;
            request.pool = pool;
            request.keep_pool = true;
            const GenerationResult real = run_decode(lm, request, nullptr);
            ASSERT_EQ(real.token_ids, std::vector<TokenId>(text->begin() + prompt_len,
                                                           text->begin() + prompt_len + max_new));
            real_steps.push_back(real.stats.steps);
            ReplayStats replay;
            shadow.start(request.prompt, &model, &replay, /*prompt_weight=*/0.0,
                         /*keep_pools=*/true);
            // The first call's shadow sees only what was emitted (its pools carry over); the
            // second one's runs N - 1 tokens on so that its last step is recorded.
            const int end = prompt_len + max_new - (text == &first_text ? 0 : 2 - n);
            for (int i = prompt_len; i < end; ++i) shadow.push((*text)[i], &model, &replay);
            replayed_steps.push_back(replay.steps(n, g));
        }
        EXPECT_EQ(replayed_steps[1], static_cast<double>(real_steps[1])) << n << "," << g;
        // Without the kept pools the replay of the second call takes more steps.
        HistoryShadow cold;
        ReplayStats cold_replay;
        cold.start(std::vector<TokenId>(second_text.begin(), second_text.begin() + prompt_len),
                   &model, &cold_replay, 0.0, /*keep_pools=*/false);
        for (int i = prompt_len; i < prompt_len + max_new - 2 + n; ++i) {
            cold.push(second_text[i], &model, &cold_replay);
        }
        EXPECT_GT(cold_replay.steps(n, g), replayed_steps[1]) << n << "," << g;
    }
}

// A pool loaded from a file (or shared) comes with its texts: seeded from them, the replay of a
// run that keeps that pool steps as the real run does. The pool was saved at N = 2, so every case
// with a larger N rebuilds it from the texts, and N = 2 keeps it as it is.
TEST(HistoryShadow, SeededPoolsReplayLikeARealRunOnALoadedPool) {
    const std::vector<TokenId> first_text = mixed_text(400, 11);
    const std::vector<TokenId> second_text(first_text.begin() + 60, first_text.end());
    const int prompt_len = 120, max_new = 200;
    for (const auto& [n, g] : kReplayCases) {
        auto pool = std::make_shared<SharedPool>();
        pool->add_text(
            std::vector<TokenId>(first_text.begin(), first_text.begin() + prompt_len + max_new));
        pool->replace(pool->pool_from_texts(1, NgramPool::kept_per_key(1)), pool->texts());
        OracleLm lm(second_text, 64, 1024);
        DecodeRequest request;
        request.prompt.assign(second_text.begin(), second_text.begin() + prompt_len);
        request.max_new_tokens = max_new;
        request.lookahead = verification_only(n, g);
        request.pool = pool;
        request.keep_pool = true;
        AcceptanceModel model;
        HistoryShadow seeded;
        seeded.seed_pools(*pool);  // before the run adds its own text to the pool
        const GenerationResult real = run_decode(lm, request, nullptr);
        ASSERT_EQ(real.token_ids, std::vector<TokenId>(second_text.begin() + prompt_len,
                                                       second_text.begin() + prompt_len + max_new));
        ReplayStats replay, cold_replay;
        HistoryShadow cold;
        seeded.start(request.prompt, &model, &replay, 0.0, /*keep_pools=*/true);
        cold.start(request.prompt, &model, &cold_replay, 0.0, /*keep_pools=*/true);
        for (int i = prompt_len; i < prompt_len + max_new - 2 + n; ++i) {
            seeded.push(second_text[i], &model, &replay);
            cold.push(second_text[i], &model, &cold_replay);
        }
        EXPECT_EQ(replay.steps(n, g), static_cast<double>(real.stats.steps)) << n << "," << g;
        EXPECT_GT(cold_replay.steps(n, g), replay.steps(n, g)) << n << "," << g;
    }
}

TEST(AutoPlanner, ReplayedVerificationOnlyConfigsUseTheirReplay) {
    AutoPlanner p;
    p.costs().set_table(table_of(1.0, mild));
    feed_history(&p.acceptance(), 400, 0, 5, 0);  // the model: history offers nothing
    for (const LookaheadConfig& c : AutoPlanner::candidate_configs()) {
        if (c.window_size != 0) continue;
        const bool good = c.ngram_size == 4 && c.verification_set_size == 2;
        for (int i = 0; i < 20; ++i) {
            p.replay().record(c.ngram_size, c.verification_set_size, good ? 2 : 1, good ? 2 : 0,
                              1.0);
        }
    }
    LookaheadConfig v;
    v.window_size = 0;
    v.ngram_size = 4;
    v.verification_set_size = 2;
    ASSERT_TRUE(p.replayed(v));
    EXPECT_DOUBLE_EQ(p.model_tokens(v), 2.0);
    EXPECT_DOUBLE_EQ(p.expected_tokens(v), 2.0);
    EXPECT_DOUBLE_EQ(p.step_seconds(v), p.costs().seconds(7));  // x + 2 candidates x 3 rows
    const PlanChoice best = p.plan(64, 0.05);
    ASSERT_TRUE(best.config.has_value());
    EXPECT_EQ(best.config->window_size, 0);
    EXPECT_EQ(best.config->ngram_size, 4);
    EXPECT_EQ(best.config->verification_set_size, 2);
    // Too few replayed steps: the acceptance model decides.
    LookaheadConfig fresh = v;
    AutoPlanner q;
    q.costs().set_table(table_of(1.0, mild));
    q.replay().record(4, 2, 4, 2, 1.0);
    EXPECT_FALSE(q.replayed(fresh));
    EXPECT_DOUBLE_EQ(q.model_tokens(fresh), q.acceptance().tokens_per_step(0, 4, 2));
    // The replay is taken as is: real steps of the config move neither it nor the model's bias
    // (a real run on other text would; the replay follows the text).
    for (int i = 0; i < 100; ++i) p.observe_lookahead_step(v, 1, 2.0, /*from_replay=*/true);
    EXPECT_DOUBLE_EQ(p.model_bias(), 1.0);
    EXPECT_DOUBLE_EQ(p.expected_tokens(v), 2.0);
}

// A replayed W = 0 config on a CPU needs only kCountedGain over greedy, not min_gain: its
// tokens are counted, and a step without candidates costs a greedy step.
TEST(AutoPlanner, ReplayedVerificationOnlyNeedsOnlyASmallGainWithoutFixedShapes) {
    for (bool fixed : {false, true}) {
        AutoPlanner p;
        p.set_fixed_shapes(fixed);
        p.costs().set_table(table_of(1.0, mild));
        feed_history(&p.acceptance(), 400, 0, 5, 0);
        for (int i = 0; i < 400; ++i) p.acceptance().observe_window(4, 2, 3, 0);  // windows miss
        for (int i = 0; i < 100; ++i) p.replay().record(4, 2, i < 17 ? 2 : 1, 2, 1.0);
        LookaheadConfig v;
        v.window_size = 0;
        v.ngram_size = 4;
        v.verification_set_size = 2;
        const double speedup = p.evaluate(v).speedup;  // 1.17 tokens at 7 rows' cost
        EXPECT_GT(speedup, 1.0 + AutoPlanner::kCountedGain);
        EXPECT_LT(speedup, 1.05);
        const PlanChoice best = p.plan(64, /*min_gain=*/0.05);
        if (fixed) {
            EXPECT_FALSE(best.config.has_value());
        } else {
            ASSERT_TRUE(best.config.has_value());
            EXPECT_EQ(best.config->ngram_size, 4);
            EXPECT_EQ(best.config->verification_set_size, 2);
        }
    }
}

// A config the acceptance model predicts (here windows, fed as good) must beat the best replayed
// config by min_gain, not only greedy: the replay counted its tokens on this very text, the model
// did not. With a bigger predicted lead the window wins.
TEST(AutoPlanner, PredictedConfigsMustBeatTheBestReplayedOneByTheMargin) {
    for (int window_matched : {1, 3}) {
        AutoPlanner p;
        p.costs().set_table(table_of(1.0, mild));
        feed_history(&p.acceptance(), 400, 0, 5, 0);
        for (int i = 0; i < 400; ++i) p.acceptance().observe_window(4, 2, 3, window_matched);
        for (int i = 0; i < 100; ++i) p.replay().record(4, 2, i < 35 ? 3 : 1, 2, 1.0);
        LookaheadConfig v;
        v.window_size = 0;
        v.ngram_size = 4;
        v.verification_set_size = 2;
        ASSERT_TRUE(p.replayed(v));
        const double counted = p.evaluate(v).speedup;
        // The best predicted config overall, and the rule applied to it.
        PlanChoice top = p.evaluate(std::nullopt);
        for (const LookaheadConfig& c : AutoPlanner::candidate_configs()) {
            const PlanChoice e = p.evaluate(c);
            if (!p.replayed(c) && e.speedup > top.speedup) top = e;
        }
        ASSERT_TRUE(top.config.has_value());
        EXPECT_GT(top.config->window_size, 0);
        EXPECT_GT(top.speedup, counted);
        const PlanChoice best = p.plan(64, /*min_gain=*/0.05);
        ASSERT_TRUE(best.config.has_value());
        if (top.speedup >= 1.05 * counted) {
            EXPECT_GT(best.config->window_size, 0) << "window lead " << top.speedup / counted;
        } else {
            EXPECT_EQ(best.config->window_size, 0) << "window lead " << top.speedup / counted;
            EXPECT_TRUE(p.replayed(*best.config));
        }
        // Both branches are exercised: a small lead (window guesses match 1 of 3) and a big one.
        EXPECT_EQ(top.speedup >= 1.05 * counted, window_matched == 3)
            << top.speedup << " vs " << counted;
    }
}

// A window's history candidates are the replay's, not the acceptance model's: the model, fed an
// optimistic history here (every candidate matches), predicts more than the replay counted for
// (0, N, G) on the same text, and only the window's increment in the slots the history leaves free
// is added to the replay. Without the anchor the windows (whose model includes that optimistic
// history) would win the plan over the counted configs.
TEST(AutoPlanner, WindowsAreAnchoredOnTheReplayOfTheirVerificationOnlyConfig) {
    AutoPlanner p;
    p.costs().set_table(table_of(1.0, mild));
    feed_history(&p.acceptance(), 400, 2, 5, 5);  // the model: two candidates, all match
    for (int i = 0; i < 400; ++i) p.acceptance().observe_window(4, 2, 3, 1);
    for (const LookaheadConfig& c : AutoPlanner::candidate_configs()) {
        if (c.window_size != 0) continue;
        // One history candidate per step, accepted on a fifth of the steps.
        for (int i = 0; i < 100; ++i) {
            p.replay().record(c.ngram_size, c.verification_set_size, i % 5 == 0 ? c.ngram_size : 1,
                              1, 1.0);
        }
    }
    LookaheadConfig w;
    w.window_size = 1;
    w.ngram_size = 4;
    w.verification_set_size = 2;
    const double a_h = p.acceptance().alpha_history(), a_w = p.acceptance().alpha_window();
    const double c_w = p.acceptance().window_candidates(1);
    const double replay = p.replay().tokens_per_step(4, 2);
    EXPECT_NEAR(replay, 1.6, 1e-12);
    const double increment = expected_step_tokens(3, 1.0, a_h, std::min(c_w, 1.0), a_w) -
                             expected_step_tokens(3, 1.0, a_h, 0.0, a_w);
    EXPECT_GT(increment, 0.0);
    EXPECT_NEAR(p.model_tokens(w), replay + increment, 1e-12);
    EXPECT_LT(p.model_tokens(w), p.acceptance().tokens_per_step(1, 4, 2) - 1.0);
    // G = 16 (no verification-only config has it) stands on the replay of G = 8.
    LookaheadConfig wide = w;
    wide.verification_set_size = 16;
    EXPECT_EQ(AutoPlanner::verification_only_anchor(wide).verification_set_size, 8);
    const double increment16 = expected_step_tokens(3, 1.0, a_h, std::min(c_w, 15.0), a_w) -
                               expected_step_tokens(3, 1.0, a_h, 0.0, a_w);
    EXPECT_NEAR(p.model_tokens(wide), p.replay().tokens_per_step(4, 8) + increment16, 1e-12);
    // The rows of a step count the replay's one history candidate plus the window's.
    const double b = 1.0 + std::min(c_w, 1.0);
    const double rows_lo = 3 + std::floor(b) * 3, rows_hi = rows_lo + 3;
    const double lo = p.costs().seconds(static_cast<int>(rows_lo));
    EXPECT_NEAR(p.step_seconds(w),
                lo + (b - std::floor(b)) * (p.costs().seconds(static_cast<int>(rows_hi)) - lo),
                1e-12);
    // So the plan keeps to a counted config.
    const PlanChoice best = p.plan(64, /*min_gain=*/0.05);
    ASSERT_TRUE(best.config.has_value());
    EXPECT_EQ(best.config->window_size, 0);
    EXPECT_TRUE(p.replayed(*best.config));
}

// The controller fed with simulated steps.
struct Sim {
    AutoPlanner planner;
    AutoLookahead options;
    std::unique_ptr<AutoController> ctl;
    int64_t step = 0;

    // `periodic`: a periodic prompt (every config predicts high acceptance). Otherwise a prompt
    // without repeats, so the verification-only replays predict nothing and only the windowed
    // configs, fed high history acceptance, look good: the runs then keep one config.
    explicit Sim(double (*per_token)(int), bool periodic = true) {
        planner.costs().set_table(table_of(1.0, per_token));
        options.replan_interval = 16;
        options.probe_after = 64;
        options.probe_steps = 8;
        std::vector<TokenId> prompt;
        for (int i = 0; i < 200; ++i) prompt.push_back(periodic ? 10 + i % 7 : 1000 + i);
        ctl = std::make_unique<AutoController>(planner, options, 64);
        ctl->start(prompt);
        if (!periodic) feed_history(&planner.acceptance(), 400, 2, 5, 5);
    }
    // Runs one step whose lookahead steps take `la_seconds` and emit `la_tokens`; greedy steps 1 s.
    std::optional<LookaheadConfig> run(double la_seconds, int la_tokens) {
        std::optional<LookaheadConfig> c = ctl->next_step(step);
        StepReport r;
        r.step = step++;
        r.tokens_per_step = c ? c->tokens_per_step() : 1;
        r.seconds = c ? la_seconds : 1.0;
        r.tokens = c ? la_tokens : 1;
        ctl->after_step(r);
        return c;
    }
};

TEST(AutoController, PlansLookaheadKeepsItWhileItPays) {
    Sim sim(flat);
    for (int i = 0; i < 200; ++i) ASSERT_TRUE(sim.run(1.0, 3).has_value()) << i;
    const auto& d = sim.ctl->decisions();
    ASSERT_GE(d.size(), 1u);
    EXPECT_EQ(d[0].step, 0);
    EXPECT_EQ(d[0].reason, "plan");
    EXPECT_FALSE(d[0].greedy());
    EXPECT_GT(d[0].predicted_speedup, 1.05);
    for (const AutoDecision& x : d) EXPECT_FALSE(x.greedy());
}

// Repeats come in bursts: 24 steps that emit one token at 1.1x a greedy step's time between
// two paying stretches do not end the run (the judgement weighs the run with a 64-step
// half-life, not only the last 16 steps, which alone are 9% slower than greedy).
TEST(AutoController, KeepsARunThatPaysThroughAQuietStretch) {
    Sim sim(flat, /*periodic=*/false);
    for (int i = 0; i < 48; ++i) ASSERT_TRUE(sim.run(1.0, 3).has_value()) << i;
    for (int i = 0; i < 24; ++i) ASSERT_TRUE(sim.run(1.1, 1).has_value()) << "quiet " << i;
    for (int i = 0; i < 48; ++i) ASSERT_TRUE(sim.run(1.0, 3).has_value()) << i;
    for (const AutoDecision& x : sim.ctl->decisions()) EXPECT_FALSE(x.greedy()) << x.step;
}

// A config chosen on the acceptance model's word (here a window, before any replay) is left once
// the replays count a verification-only config that it does not beat by min_gain, even when the
// model's prediction for it stays within the 10% switch margin (the replays are recorded
// directly here, as in PredictedConfigsMustBeatTheBestReplayedOneByTheMargin).
TEST(AutoController, LeavesAPredictedConfigForABetterCountedOne) {
    AutoPlanner planner;
    planner.costs().set_table(table_of(1.0, mild));
    AutoLookahead options;
    options.replan_interval = 16;
    options.probe_steps = 8;
    AutoController ctl(planner, options, 64);
    ctl.start({});
    feed_history(&planner.acceptance(), 400, 0, 5, 0);
    for (int i = 0; i < 400; ++i) planner.acceptance().observe_window(4, 2, 3, 1);
    LookaheadConfig counted;
    counted.window_size = 0;
    counted.ngram_size = 4;
    counted.verification_set_size = 2;
    std::optional<LookaheadConfig> current;
    double counted_at_switch = 0.0, window_at_switch = 0.0;
    for (int64_t step = 0; step < 96; ++step) {
        const double counted_now = planner.evaluate(counted).speedup;
        const double current_now = current ? planner.evaluate(current).speedup : 0.0;
        const std::optional<LookaheadConfig> c = ctl.next_step(step);
        ASSERT_TRUE(c.has_value()) << step;
        if (step == 0) ASSERT_GT(c->window_size, 0);
        if (current && current->window_size > 0 && c->window_size == 0) {
            counted_at_switch = counted_now;
            window_at_switch = current_now;
        }
        current = c;
        planner.replay().record(4, 2, (step * 7) % 20 < 7 ? 3 : 1, 2, 1.0);  // 35%, spread
        StepReport r;
        r.step = step;
        r.tokens_per_step = c->tokens_per_step();
        r.tokens = 2;  // the window pays as predicted, so its prediction stays up
        r.seconds = planner.costs().seconds(r.tokens_per_step);
        r.num_candidates = 2;
        r.window_candidates = c->window_size > 0 ? 2 : 0;
        r.window_matched = c->window_size > 0 ? 1 : 0;
        ctl.after_step(r);
    }
    const std::vector<AutoDecision> d = ctl.decisions();
    ASSERT_GE(d.size(), 2u);
    EXPECT_GT(d[0].window_size, 0);
    EXPECT_EQ(d.back().window_size, 0);
    EXPECT_EQ(d.back().ngram_size, 4);
    EXPECT_EQ(d.back().verification_set_size, 2);
    EXPECT_EQ(d.back().reason, "plan");
    // At the switch the counted config's lead was within the switch margin: without the rule
    // the window would have stayed.
    ASSERT_GT(window_at_switch, 0.0);
    EXPECT_LT(counted_at_switch, window_at_switch * (1.0 + AutoController::kSwitchMargin))
        << counted_at_switch << " vs " << window_at_switch;
}

// A replayed verification-only run (the periodic prompt's replays count it) that runs 9% slower
// than greedy is not ended on its first 64 steps (only a miss of more than 15% would be), and is
// after that. The 3 s-per-2-tokens run of the next test is ended at its first judgement. (On a
// memory-bound device: with free wide steps, a window on top of the counted config would be
// planned at the first judgement, once the run's measured steps make the counted one look slow.)
TEST(AutoController, ACountedRunFallsBackEarlyOnlyOnAGrossMiss) {
    Sim sim(mild);
    std::optional<LookaheadConfig> first = sim.run(1.1, 1);
    ASSERT_TRUE(first.has_value());
    EXPECT_TRUE(sim.planner.replayed(*first));
    for (int i = 1; i < 200; ++i) sim.run(1.1, 1);
    std::vector<AutoDecision> fallbacks;
    for (const AutoDecision& x : sim.ctl->decisions()) {
        if (x.reason == "fallback") fallbacks.push_back(x);
    }
    ASSERT_GE(fallbacks.size(), 1u);
    EXPECT_GE(fallbacks[0].step, AutoController::kCountedJudgeSteps);
    EXPECT_LE(fallbacks[0].step, AutoController::kCountedJudgeSteps + 16);
}

TEST(AutoController, FallsBackWhenSlowerThanGreedyAndProbesWithBackoff) {
    Sim sim(flat);
    // Lookahead steps really take 3 s for 2 tokens: slower than a 1 s greedy step.
    int64_t first_greedy = -1;
    for (int i = 0; i < 40; ++i) {
        if (!sim.run(3.0, 2) && first_greedy < 0) first_greedy = i;
    }
    EXPECT_EQ(first_greedy, 8);  // judged after probe_steps
    const auto& d = sim.ctl->decisions();
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(d[1].reason, "fallback");
    EXPECT_TRUE(d[1].greedy());
    EXPECT_EQ(d[1].step, 8);
    // The judgement is reported: 2 tokens per 3 s against greedy's 1 s per token.
    EXPECT_NEAR(d[1].judged_speedup, 2.0 / 3.0, 1e-9);
    EXPECT_NEAR(d[1].greedy_step_s, 1.0, 1e-9);
    EXPECT_EQ(d[0].judged_speedup, 0.0);
    // Greedy for at least probe_after steps, then a probe if the model still predicts a gain.
    std::vector<int64_t> lookahead_steps;
    for (int i = 0; i < 600; ++i) {
        const int64_t s = sim.step;
        if (sim.run(3.0, 2)) lookahead_steps.push_back(s);
    }
    std::vector<AutoDecision> probes, fallbacks;
    for (const AutoDecision& x : sim.ctl->decisions()) {
        if (x.reason == "probe") probes.push_back(x);
        if (x.reason == "fallback") fallbacks.push_back(x);
    }
    ASSERT_GE(probes.size(), 1u);
    EXPECT_GE(probes[0].step, d[1].step + 64);
    // Each failed probe doubles the wait: few lookahead steps overall.
    for (size_t i = 1; i < probes.size() && i < fallbacks.size(); ++i) {
        EXPECT_GE(probes[i].step - fallbacks[i].step, 64 << std::min<int>(i, 4));
    }
    EXPECT_LT(lookahead_steps.size(), 60u);
}

// A shared machine slows down by half after the session measured its greedy steps at 1 s. A
// verification-only run's one-row steps (no candidate) now take 2 s and its wider steps 2.2 s
// for 2 tokens: it pays 1.43x against greedy now. Judged against the greedy steps measured
// before (1 s) it would look 29% slower than greedy and fall back; judged against its own
// one-row steps it stays. A run that is slow against its own one-row steps still falls back.
TEST(AutoController, JudgesARunAgainstItsOwnOneRowSteps) {
    for (const double wide_seconds : {2.2, 8.0}) {
        Sim sim(mild);
        for (int i = 0; i < StepCostModel::kKeep; ++i) sim.planner.costs().observe(1, 1.0);
        ASSERT_NEAR(sim.planner.costs().seconds(1), 1.0, 1e-12);
        std::vector<int64_t> greedy_steps;
        for (int i = 0; i < 40; ++i) {
            const std::optional<LookaheadConfig> c = sim.ctl->next_step(sim.step);
            if (!c) greedy_steps.push_back(sim.step);
            if (i == 0) ASSERT_TRUE(c && sim.planner.replayed(*c));
            StepReport r;
            r.step = sim.step++;
            const bool one_row = !c || i % 2 == 0;
            r.tokens_per_step = one_row ? 1 : c->tokens_per_step();
            r.seconds = one_row ? 2.0 : wide_seconds;
            r.tokens = one_row ? 1 : 2;
            sim.ctl->after_step(r);
        }
        const std::vector<AutoDecision>& d = sim.ctl->decisions();
        if (wide_seconds < 3.0) {
            EXPECT_TRUE(greedy_steps.empty()) << "fell back at step " << greedy_steps.front();
            for (const AutoDecision& x : d) EXPECT_NE(x.reason, "fallback");
        } else {
            // About 3 tokens per 10 s against 2 s per greedy token: 0.6x, a gross miss, ended
            // at the first judgement.
            ASSERT_GE(d.size(), 2u);
            EXPECT_EQ(d[1].reason, "fallback");
            EXPECT_EQ(d[1].step, sim.options.probe_steps);
            EXPECT_NEAR(d[1].greedy_step_s, 2.0, 1e-9);
            EXPECT_NEAR(d[1].judged_speedup, 0.6, 0.05);
        }
    }
}

TEST(AutoController, ExpensiveTableStaysGreedy) {
    Sim sim(linear);
    for (int i = 0; i < 300; ++i) EXPECT_FALSE(sim.run(1.0, 1).has_value());
    ASSERT_EQ(sim.ctl->decisions().size(), 1u);
    EXPECT_TRUE(sim.ctl->decisions()[0].greedy());
    EXPECT_EQ(sim.ctl->decisions()[0].reason, "plan");
}

}  // namespace
}  // namespace pylookahead
