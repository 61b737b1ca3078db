// The decode loop's automatic mode against the oracle LM (oracle_lm.h): whatever configurations
// a policy switches between, and wherever, the output is the greedy output token for token.
// Timings come from a simulated clock that the model advances by a scripted cost per step.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <vector>

#include "lookahead/auto/controller.h"
#include "lookahead/decode_loop.h"
#include "oracle_lm.h"
#include "oracle_text.h"
#include "pylookahead/errors.h"

namespace pylookahead {
namespace {

using Tokens = std::vector<TokenId>;
constexpr int kVocab = 64;

LookaheadConfig config_of(int W, int N, int G) {
    LookaheadConfig c;
    c.window_size = W;
    c.ngram_size = N;
    c.verification_set_size = G;
    return c;
}

// The oracle LM on a simulated clock: every forward pass of T tokens advances it by cost(T).
class TimedOracle : public OracleLm {
  public:
    TimedOracle(Tokens seq, int capacity, std::function<double(int)> cost)
        : OracleLm(std::move(seq), kVocab, capacity), cost_(std::move(cost)) {}
    void forward_step(const std::vector<TokenId>& tokens, const std::vector<int32_t>& positions,
                      const uint8_t* mask, const std::vector<int32_t>& out_rows,
                      const std::vector<int32_t>& exact_rows,
                      const std::vector<int32_t>& out_parent, std::vector<TokenId>* argmax,
                      TokenSampler* sampler) override {
        OracleLm::forward_step(tokens, positions, mask, out_rows, exact_rows, out_parent, argmax,
                               sampler);
        now_ += cost_(static_cast<int>(tokens.size()));
        ++steps_by_tokens_[tokens.size()];
    }
    std::function<double()> clock() {
        return [this] { return now_; };
    }
    void set_cost(std::function<double(int)> cost) { cost_ = std::move(cost); }
    std::map<size_t, int> steps_by_tokens_;

  private:
    std::function<double(int)> cost_;
    double now_ = 0.0;
};

// Switches along a fixed script: config i for `every` steps, then config i + 1, cyclically.
class ScriptedPolicy : public StepPolicy {
  public:
    ScriptedPolicy(std::vector<std::optional<LookaheadConfig>> script, int every)
        : script_(std::move(script)), every_(every) {}
    int max_tokens_per_step() const override {
        int t = 1;
        for (const auto& c : script_)
            if (c) t = std::max(t, c->tokens_per_step());
        return t;
    }
    int max_step_tokens() const override {
        int n = 1;
        for (const auto& c : script_)
            if (c) n = std::max(n, c->ngram_size);
        return n;
    }
    void start(const std::vector<TokenId>& prompt) override { emitted_ = prompt; }
    void on_emitted(const TokenId* t, int n) override { emitted_.insert(emitted_.end(), t, t + n); }
    std::optional<LookaheadConfig> next_step(int64_t step) override {
        const auto& c = script_[(step / every_) % script_.size()];
        if (step % every_ == 0) {
            AutoDecision d;
            d.step = step;
            if (c) {
                d.window_size = c->window_size;
                d.ngram_size = c->ngram_size;
                d.verification_set_size = c->verification_set_size;
            }
            decisions_.push_back(d);
        }
        return c;
    }
    void after_step(const StepReport& r) override { reports_.push_back(r); }
    std::vector<AutoDecision> decisions() const override { return decisions_; }

    Tokens emitted_;
    std::vector<StepReport> reports_;

  private:
    std::vector<std::optional<LookaheadConfig>> script_;
    int every_;
    std::vector<AutoDecision> decisions_;
};

GenerationResult run(StepModel& lm, const Tokens& text, int prompt_len, int max_new,
                     StepPolicy* policy, const Tokens& end_ids = {},
                     std::function<double()> clock = nullptr) {
    DecodeRequest request;
    request.prompt.assign(text.begin(), text.begin() + prompt_len);
    request.max_new_tokens = max_new;
    request.end_ids = end_ids;
    request.policy = policy;
    request.clock = std::move(clock);
    return run_decode(lm, request, nullptr);
}

void check_counts(const GenerationResult& r) {
    const GenerationStats& s = r.stats;
    expect_histogram_adds_up(s);
    EXPECT_EQ(s.new_tokens, static_cast<int64_t>(r.token_ids.size()));
}

TEST(AutoDecode, ScriptedSwitchesKeepGreedyOutput) {
    const std::vector<std::optional<LookaheadConfig>> script = {
        std::nullopt, config_of(2, 3, 2), config_of(4, 5, 4), config_of(1, 6, 16),
        std::nullopt, config_of(8, 4, 1), config_of(3, 2, 2), config_of(16, 6, 8)};
    for (const Tokens& text : {mixed_text(260, 1), periodic_text(260), mixed_text(260, 9)}) {
        for (int every : {1, 2, 3, 5, 16}) {
            for (int prompt_len : {1, 17, 60}) {
                const int max_new = 180;
                OracleLm lm(text, kVocab, 4096);
                ScriptedPolicy policy(script, every);
                const GenerationResult r = run(lm, text, prompt_len, max_new, &policy);
                ASSERT_EQ(r.token_ids, expected(text, prompt_len, max_new, {}))
                    << "every " << every << " prompt " << prompt_len;
                check_counts(r);
                EXPECT_EQ(policy.emitted_,
                          Tokens(text.begin(), text.begin() + prompt_len + max_new));
                EXPECT_EQ(policy.reports_.size(), static_cast<size_t>(r.stats.steps));
                int64_t la = 0;
                for (const StepReport& rep : policy.reports_) la += rep.tokens_per_step > 1;
                EXPECT_EQ(la, r.stats.lookahead_steps);
                EXPECT_GT(r.stats.lookahead_steps, 0);
                EXPECT_LT(r.stats.lookahead_steps, r.stats.steps);
                EXPECT_EQ(r.stats.auto_decisions.size(), policy.decisions().size());
                ASSERT_EQ(r.stats.accept_histogram.size(), 7u);
            }
        }
    }
}

TEST(AutoDecode, ScriptedSwitchesCutExactlyAtEndIdsAndLength) {
    const std::vector<std::optional<LookaheadConfig>> script = {config_of(2, 4, 2), std::nullopt,
                                                                config_of(3, 5, 4)};
    const Tokens text = periodic_text(200);
    for (int every : {1, 2, 3}) {
        for (int m = 1; m <= 30; ++m) {
            OracleLm lm(text, kVocab, 4096);
            ScriptedPolicy policy(script, every);
            EXPECT_EQ(run(lm, text, 20, m, &policy).token_ids, expected(text, 20, m, {})) << m;
        }
        for (TokenId end : {31, 33, 36}) {
            OracleLm lm(text, kVocab, 4096);
            ScriptedPolicy policy(script, every);
            const GenerationResult r = run(lm, text, 20, 100, &policy, {end});
            EXPECT_EQ(r.token_ids, expected(text, 20, 100, {end}));
            EXPECT_EQ(r.stop_reason, StopReason::kEndToken);
        }
    }
}

// The real controller over the planner, on the simulated clock.
struct AutoRun {
    GenerationResult result;
    std::map<size_t, int> steps_by_tokens;
};

AutoRun run_auto(AutoPlanner* planner, const Tokens& text, int prompt_len, int max_new,
                 std::function<double(int)> cost, const AutoLookahead& options = {},
                 std::function<void(TimedOracle&, int64_t)> change = nullptr) {
    TimedOracle lm(text, 4096, cost);
    const int max_tokens = std::min(planner->costs().max_tokens(), 4096 - prompt_len - max_new);
    AutoController ctl(*planner, options, max_tokens);
    DecodeRequest request;
    request.prompt.assign(text.begin(), text.begin() + prompt_len);
    request.max_new_tokens = max_new;
    request.policy = &ctl;
    request.clock = lm.clock();
    request.step_costs = &planner->costs();  // sizes draft trees, as a Session does
    int64_t calls = 0;
    AutoRun out;
    out.result = run_decode(lm, request, [&](const Tokens&) {
        if (change) change(lm, calls);
        ++calls;
        return true;
    });
    out.steps_by_tokens = lm.steps_by_tokens_;
    return out;
}

std::vector<StepCost> table(std::function<double(int)> cost) {
    std::vector<StepCost> t;
    for (int T : {1, 4, 8, 16, 32, 64}) t.push_back({T, cost(T)});
    return t;
}

TEST(AutoDecode, CheapStepsOnRepetitiveTextUseLookahead) {
    auto cost = [](int T) { return 0.01 * (1 + 0.01 * T); };
    AutoPlanner planner;
    planner.costs().set_table(table(cost));
    const Tokens text = periodic_text(400);
    const AutoRun r = run_auto(&planner, text, 40, 300, cost);
    EXPECT_EQ(r.result.token_ids, expected(text, 40, 300, {}));
    check_counts(r.result);
    const auto& d = r.result.stats.auto_decisions;
    ASSERT_GE(d.size(), 1u);
    EXPECT_FALSE(d[0].greedy());
    EXPECT_GT(r.result.stats.lookahead_steps, r.result.stats.steps * 9 / 10);
    EXPECT_GT(r.result.stats.compression(), 3.0);
    for (const AutoDecision& x : d) EXPECT_NE(x.reason, "fallback");
}

TEST(AutoDecode, ExpensiveStepsStayGreedy) {
    auto cost = [](int T) { return 0.01 * T; };
    AutoPlanner planner;
    planner.costs().set_table(table(cost));
    const Tokens text = periodic_text(400);
    const AutoRun r = run_auto(&planner, text, 40, 300, cost);
    EXPECT_EQ(r.result.token_ids, expected(text, 40, 300, {}));
    EXPECT_EQ(r.result.stats.lookahead_steps, 0);
    ASSERT_EQ(r.result.stats.auto_decisions.size(), 1u);
    EXPECT_TRUE(r.result.stats.auto_decisions[0].greedy());
    EXPECT_EQ(r.steps_by_tokens.size(), 2u);  // prefill + 1-token steps only
}

TEST(AutoDecode, FallsBackMidGenerationAndProbesAgainExactly) {
    // The table says wide steps are cheap; after 30 steps they become 20x dearer, after 400
    // cheap again. The loop must drop to greedy, probe later, and keep greedy output throughout.
    auto cheap = [](int T) { return 0.01 * (1 + 0.01 * T); };
    auto dear = [](int T) { return T > 1 ? 0.2 * (1 + 0.01 * T) : 0.01; };
    for (const Tokens& text : {periodic_text(1100), mixed_text(1100, 4)}) {
        AutoPlanner planner;
        planner.costs().set_table(table(cheap));
        AutoLookahead options;
        options.probe_after = 32;
        options.tree_rows = 0;  // classic slots: a tree on this text would finish before the change
        const AutoRun r =
            run_auto(&planner, text, 40, 1000, cheap, options, [&](TimedOracle& lm, int64_t call) {
                if (call == 30) lm.set_cost(dear);
                if (call == 400) lm.set_cost(cheap);
            });
        ASSERT_EQ(r.result.token_ids, expected(text, 40, 1000, {}));
        check_counts(r.result);
        const auto& d = r.result.stats.auto_decisions;
        bool fell_back = false, probed_after = false;
        for (const AutoDecision& x : d) {
            if (x.reason == "fallback") {
                fell_back = true;
                EXPECT_TRUE(x.greedy());
            }
            if (fell_back && x.reason == "probe") probed_after = true;
        }
        EXPECT_TRUE(fell_back);
        EXPECT_TRUE(probed_after);
        EXPECT_GT(r.result.stats.lookahead_steps, 0);
        EXPECT_LT(r.result.stats.lookahead_steps, r.result.stats.steps);
    }
}

// Verification-only choices run as draft trees (AutoLookahead::tree_rows): still greedy's output,
// and suffix lookup and recycling supply tokens.
TEST(AutoDecode, VerificationOnlyChoicesRunAsDraftTrees) {
    auto cost = [](int T) { return 0.01 * (1 + 0.02 * T); };
    for (const Tokens& text : {periodic_text(700), mixed_text(700, 5)}) {
        for (int rows : {0, 8, 32}) {
            AutoPlanner planner;
            planner.costs().set_table(table(cost));
            AutoLookahead options;
            options.tree_rows = rows;
            const AutoRun r = run_auto(&planner, text, 40, 600, cost, options);
            ASSERT_EQ(r.result.token_ids, expected(text, 40, 600, {})) << "tree_rows " << rows;
            check_counts(r.result);
            const GenerationStats& s = r.result.stats;
            EXPECT_EQ(s.accept_histogram.size(), static_cast<size_t>(std::max(7, rows + 2)));
            const int64_t tree_drafts =
                s.accepted_tokens_by_source[2] + s.accepted_tokens_by_source[3];
            if (rows == 0) EXPECT_EQ(tree_drafts, 0);
            if (rows > 0 && text[41] == text[48]) EXPECT_GT(tree_drafts, 0);  // the periodic text
        }
    }
}

TEST(AutoDecode, KvRoomCapsTheTokensPerStep) {
    auto cost = [](int T) { return 0.01 * (1 + 0.001 * T); };
    AutoPlanner planner;
    planner.costs().set_table(table(cost));
    const Tokens text = periodic_text(200);
    TimedOracle lm(text, 40 + 100 + 12, cost);
    AutoController ctl(planner, {}, 12);
    DecodeRequest request;
    request.prompt.assign(text.begin(), text.begin() + 40);
    request.max_new_tokens = 100;
    request.policy = &ctl;
    request.clock = lm.clock();
    const GenerationResult r = run_decode(lm, request, nullptr);
    EXPECT_EQ(r.token_ids, expected(text, 40, 100, {}));
    for (const AutoDecision& d : r.stats.auto_decisions) {
        EXPECT_LE((d.window_size + d.verification_set_size) * (d.ngram_size - 1), 12);
    }
    AutoController too_wide(planner, {}, 13);
    // Session::generate caps the policy to the room; the loop checks it.
    request.policy = &too_wide;
    EXPECT_THROW(run_decode(lm, request, nullptr), InternalError);
}

// Accepts any tokens (the calibration's are dummies); only keeps the cache length and the clock.
class CostOnlyModel : public StepModel {
  public:
    CostOnlyModel(int capacity, std::function<double(int)> cost)
        : capacity_(capacity), cost_(std::move(cost)) {}
    void forward_step(const std::vector<TokenId>& tokens, const std::vector<int32_t>& positions,
                      const uint8_t*, const std::vector<int32_t>& out_rows,
                      const std::vector<int32_t>&, const std::vector<int32_t>&,
                      std::vector<TokenId>* argmax, TokenSampler*) override {
        ASSERT_LE(kv_len_ + static_cast<int>(tokens.size()), capacity_);
        for (size_t i = 0; i < positions.size(); ++i) ASSERT_GE(positions[i], kv_len_);
        ++num_forward_;
        now_ += cost_(static_cast<int>(tokens.size()));
        argmax->assign(out_rows.size(), 0);
    }
    void commit(const std::vector<int32_t>& rows) override {
        kv_len_ += static_cast<int>(rows.size());
    }
    int kv_len() const override { return kv_len_; }
    int kv_capacity() const override { return capacity_; }
    void truncate(int rows) override { kv_len_ = rows; }
    std::function<double()> clock() {
        return [this] { return now_; };
    }
    int num_forward() const { return num_forward_; }

  private:
    int capacity_;
    std::function<double(int)> cost_;
    int kv_len_ = 0;
    int num_forward_ = 0;
    double now_ = 0.0;
};

TEST(Calibration, TimesEachLayoutAndExtendsWhileCheap) {
    {
        CostOnlyModel lm(4096, [](int T) { return 1.0 + 0.01 * T; });
        CalibrationOptions o;
        o.vocab_size = kVocab;
        o.clock = lm.clock();
        const std::vector<StepCost> t = calibrate_step_costs(lm, o);
        ASSERT_EQ(t.size(), 10u);
        const int want[] = {1, 2, 3, 4, 8, 16, 32, 64, 128, 256};
        for (size_t i = 0; i < t.size(); ++i) {
            EXPECT_EQ(t[i].tokens, want[i]);
            EXPECT_NEAR(t[i].seconds, 1.0 + 0.01 * want[i], 1e-9);
        }
        EXPECT_EQ(lm.kv_len(), 0);
        // context + (warm-up + 3) rounds of the greedy step and 7 points, then of it and 2 more
        EXPECT_EQ(lm.num_forward(), 1 + 4 * 8 + 4 * 3);
    }
    {
        CostOnlyModel lm(4096, [](int T) { return 1.0 * T; });
        CalibrationOptions o;
        o.vocab_size = kVocab;
        o.clock = lm.clock();
        EXPECT_EQ(calibrate_step_costs(lm, o).back().tokens, 64);  // wide steps are dear: stop
    }
    {
        CostOnlyModel lm(40, [](int) { return 1.0; });  // a small cache bounds T
        CalibrationOptions o;
        o.vocab_size = kVocab;
        o.clock = lm.clock();
        const std::vector<StepCost> t = calibrate_step_costs(lm, o);
        EXPECT_EQ(t.back().tokens, 16);  // 20 context rows + at most 20 step rows
        EXPECT_EQ(lm.kv_len(), 0);
    }
}

// A burst of other load (a run of consecutive forwards 3x slower) spoils at most one round of
// each point, wherever it falls, so every point keeps its true cost; timed point by point, the
// burst would land on all runs of one point.
TEST(Calibration, ABurstOfLoadSpoilsOneRoundNotOnePoint) {
    for (int start = 1; start < 1 + 4 * 8; ++start) {
        int forwards = 0;
        auto cost = [&](int T) {
            const int i = forwards++;
            const double slow = i >= start && i < start + 8 ? 3.0 : 1.0;
            return slow * (1.0 + 0.25 * T);
        };
        CostOnlyModel lm(4096, cost);
        CalibrationOptions o;
        o.vocab_size = kVocab;
        o.max_tokens = 64;
        o.clock = lm.clock();
        const std::vector<StepCost> t = calibrate_step_costs(lm, o);
        ASSERT_EQ(t.size(), 8u) << "burst from forward " << start;
        for (const StepCost& c : t) {
            EXPECT_NEAR(c.seconds, 1.0 + 0.25 * c.tokens, 1e-9)
                << "T = " << c.tokens << ", burst from forward " << start;
        }
    }
}

}  // namespace
}  // namespace pylookahead
