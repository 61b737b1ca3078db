// The step policy interface of the decode loop and the automatic controller (std-only): per
// generation, plan, switch, fall back to greedy when lookahead runs slower, probe again.
// docs/auto.md explains the decisions.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "lookahead/auto/history_shadow.h"
#include "lookahead/auto/planner.h"
#include "pylookahead/config.h"
#include "pylookahead/types.h"

namespace pylookahead {

// What the decode loop reports after each step to a StepPolicy.
struct StepReport {
    int64_t step = 0;
    double seconds = 0.0;       // wall time of the step
    int tokens = 1;             // tokens it emitted (kept, after any stop)
    int tokens_per_step = 1;    // T of its forward pass
    int num_candidates = 0;     // lookahead: candidates verified
    int window_candidates = 0;  // lookahead: of them from the Jacobi window
    int window_matched = 0;     // lookahead: best match of a window candidate
};

// Chooses the configuration of every step of one generation (the decode loop's auto mode). The
// loop calls start() after prefill, then for every step next_step() and after_step(), and
// on_emitted() for every emitted token (the prefill's first included).
class StepPolicy {
  public:
    virtual ~StepPolicy() = default;
    // Most tokens per step it may ask for (the loop checks the KV room for it).
    virtual int max_tokens_per_step() const = 0;
    // Most tokens one of its steps may emit: the largest N, or R + 1 for a draft tree (sizes the
    // accept histogram).
    virtual int max_step_tokens() const = 0;
    virtual void start(const std::vector<TokenId>& prompt) = 0;
    virtual void on_emitted(const TokenId* tokens, int n) = 0;
    // The configuration of step `step` (nullopt = a greedy step). When it differs from the
    // previous step's, the loop restarts lookahead from the history (prompt + emitted tokens).
    virtual std::optional<LookaheadConfig> next_step(int64_t step) = 0;
    virtual void after_step(const StepReport& report) = 0;
    // The switches made, for GenerationStats::auto_decisions.
    virtual std::vector<AutoDecision> decisions() const = 0;
};

// The automatic policy of one generation over a Session's AutoPlanner: plan, switch, fall back
// to greedy when lookahead runs slower than greedy, probe again later. See docs/auto.md.
class AutoController : public StepPolicy {
  public:
    // `max_tokens`: the most tokens per step allowed (calibrated range, option cap, KV room).
    // `shadow`: the Session's HistoryShadow, whose pools outlive the generation (nullptr: one of
    // its own); `keep_pool`: the generation keeps the pool of earlier calls, so the shadow keeps
    // its replay pools too.
    AutoController(AutoPlanner& planner, const AutoLookahead& options, int max_tokens,
                   HistoryShadow* shadow = nullptr, bool keep_pool = false);
    AutoController(const AutoController&) = delete;
    AutoController& operator=(const AutoController&) = delete;

    int max_tokens_per_step() const override { return max_tokens_; }
    int max_step_tokens() const override;
    void start(const std::vector<TokenId>& prompt) override;
    void on_emitted(const TokenId* tokens, int n) override;
    // The plan's config; a verification-only one runs as a draft tree (AutoLookahead::tree_rows).
    std::optional<LookaheadConfig> next_step(int64_t step) override;
    // `config` as it runs: W = 0 with the tree options when tree_rows() > 0.
    std::optional<LookaheadConfig> as_run(const std::optional<LookaheadConfig>& config) const;
    int tree_rows() const;
    void after_step(const StepReport& report) override;
    std::vector<AutoDecision> decisions() const override { return decisions_; }

    // Weight of each prompt position in the acceptance statistics (generated tokens weigh 1).
    static constexpr double kPromptWeight = 0.25;
    // A lookahead config replaces the running one only if predicted this much faster.
    static constexpr double kSwitchMargin = 0.10;
    // A lookahead run is judged slower than greedy (fallback) only below greedy's rate by more
    // than this: a verification-only run whose text offers few candidates runs at about
    // greedy's speed, and machine noise alone would otherwise send it back to greedy.
    static constexpr double kFallbackTolerance = 0.03;
    // Judgements weigh the run's steps with this half-life (in steps), not just the last
    // replan_interval: repeats come in bursts (code), and a quiet stretch between two bursts is
    // not a reason to leave a config that pays overall.
    static constexpr double kJudgeHalfLife = 64.0;
    // A replayed verification-only run without fixed shapes (its tokens counted on this text, a
    // step without candidates costing a greedy step) is held to kFallbackTolerance only after
    // kCountedJudgeSteps steps; before, only a gross miss (slower by kEarlyFallbackTolerance)
    // ends it. Over its first 24 steps the opening of an answer, often poor in repeats, and
    // machine noise sent runs that paid 1.3-1.5x back to greedy for 64 steps (HumanEval, Qwen
    // 0.5B bf16).
    static constexpr int64_t kCountedJudgeSteps = 64;
    static constexpr double kEarlyFallbackTolerance = 0.15;
    // Weight of one-row steps a run needs before its judgement takes greedy's cost from them.
    static constexpr double kMinOwnGreedySteps = 3.0;

    static constexpr int kTreeSuffixBranches = 4;
    static constexpr int kTreeRecycleTopK = 8;

  private:
    std::optional<LookaheadConfig> plan_step(int64_t step);
    // `judged_speedup` and `greedy_step_s`: what the judgement that ended the run being left
    // measured (0 when none did).
    void switch_to(int64_t step, const PlanChoice& choice, const char* reason,
                   double judged_speedup = 0.0, double greedy_step_s = 0.0);

    AutoPlanner& planner_;
    AutoLookahead options_;
    int max_tokens_;
    std::unique_ptr<HistoryShadow> own_shadow_;  // only when the caller gives none
    HistoryShadow* shadow_;
    bool keep_pool_;
    std::optional<LookaheadConfig> current_;
    double current_model_tokens_ = 1.0;  // model_tokens of it, when chosen
    bool current_replayed_ = false;      // whether that value was a replay's
    std::vector<AutoDecision> decisions_;
    bool started_ = false;
    int64_t steps_in_mode_ = 0;      // steps since the last switch
    int64_t steps_since_check_ = 0;  // steps since the last plan / judgement
    int64_t judge_after_ = 0;        // lookahead: steps before the next judgement
    // Tokens and seconds of the running lookahead config since it started, older steps fading
    // with a half-life of kJudgeHalfLife steps: what a judgement compares with greedy's rate.
    double window_tokens_ = 0.0;
    double window_seconds_ = 0.0;
    // The same for the run's one-row steps (no candidate to verify): greedy's cost, measured
    // beside the run. Used by a judgement once they weigh kMinOwnGreedySteps.
    double window_greedy_steps_ = 0.0;
    double window_greedy_seconds_ = 0.0;
    int64_t backoff_ = 0;   // greedy steps to wait after a fallback (0 = none)
    int failed_ = 0;        // consecutive lookahead runs judged slower than greedy
    bool probing_ = false;  // the current lookahead run follows a fallback
};

}  // namespace pylookahead
