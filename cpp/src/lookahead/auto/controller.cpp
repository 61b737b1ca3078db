#include "lookahead/auto/controller.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "check.h"
#include "pylookahead/errors.h"

namespace pylookahead {

AutoController::AutoController(AutoPlanner& planner, const AutoLookahead& options, int max_tokens,
                               HistoryShadow* shadow, bool keep_pool)
    : planner_(planner),
      options_(options),
      max_tokens_(max_tokens),
      own_shadow_(shadow ? nullptr : std::make_unique<HistoryShadow>()),
      shadow_(shadow ? shadow : own_shadow_.get()),
      keep_pool_(keep_pool) {
    PYLA_CHECK(planner_.costs().has_table(), "automatic lookahead without a step cost table");
}

void AutoController::start(const std::vector<TokenId>& prompt) {
    shadow_->start(prompt, &planner_.acceptance(), &planner_.replay(), kPromptWeight, keep_pool_);
}

void AutoController::on_emitted(const TokenId* tokens, int n) {
    for (int i = 0; i < n; ++i)
        shadow_->push(tokens[i], &planner_.acceptance(), &planner_.replay());
}

void AutoController::switch_to(int64_t step, const PlanChoice& choice, const char* reason,
                               double judged_speedup, double greedy_step_s) {
    current_ = choice.config;
    if (current_) current_->seed = options_.seed;
    current_model_tokens_ = current_ ? planner_.model_tokens(*current_) : 1.0;
    current_replayed_ = current_ && planner_.replayed(*current_);
    AutoDecision d;
    d.step = step;
    if (current_) {
        d.window_size = current_->window_size;
        d.ngram_size = current_->ngram_size;
        d.verification_set_size = current_->verification_set_size;
    }
    d.reason = reason;
    d.expected_tokens = choice.expected_tokens;
    d.predicted_speedup = choice.speedup;
    d.judged_speedup = judged_speedup;
    d.greedy_step_s = greedy_step_s;
    decisions_.push_back(d);
    steps_in_mode_ = 0;
    steps_since_check_ = 0;
    judge_after_ = options_.probe_steps;
    window_tokens_ = 0.0;
    window_seconds_ = 0.0;
    window_greedy_steps_ = 0.0;
    window_greedy_seconds_ = 0.0;
}

int AutoController::tree_rows() const {
    return std::max(0, std::min(options_.tree_rows, max_tokens_ - 1));
}

int AutoController::max_step_tokens() const {
    return std::max(AutoPlanner::kMaxNgramSize, tree_rows() + 1);
}

std::optional<LookaheadConfig> AutoController::as_run(
    const std::optional<LookaheadConfig>& config) const {
    if (!config || config->window_size != 0 || tree_rows() == 0) return config;
    LookaheadConfig c = *config;
    c.tree_rows = tree_rows();
    c.suffix_branches = kTreeSuffixBranches;
    c.recycle_top_k = kTreeRecycleTopK;
    return c;
}

std::optional<LookaheadConfig> AutoController::next_step(int64_t step) {
    return as_run(plan_step(step));
}

std::optional<LookaheadConfig> AutoController::plan_step(int64_t step) {
    if (!started_) {
        started_ = true;
        switch_to(step, planner_.plan(max_tokens_, options_.min_gain), "plan");
        return current_;
    }
    if (current_) {
        if (steps_since_check_ < judge_after_) return current_;
        // Judge the run: its tokens/s against greedy's. Greedy's cost is that of the run's own
        // one-row steps (a verification-only step without candidates is a greedy step) when it
        // has enough of them: measured over the same stretch of time, they see the same machine.
        // Else the cost model's (the last measured greedy steps, or the table's), which may date
        // from a faster or slower moment of a shared machine.
        const double greedy_s = window_greedy_steps_ >= kMinOwnGreedySteps
                                    ? window_greedy_seconds_ / window_greedy_steps_
                                    : planner_.costs().seconds(1);
        const double greedy_rate = 1.0 / greedy_s;
        const bool early_counted = planner_.replayed(*current_) && !planner_.fixed_shapes() &&
                                   steps_in_mode_ < kCountedJudgeSteps;
        const double tolerance = early_counted ? kEarlyFallbackTolerance : kFallbackTolerance;
        const double judged =
            window_seconds_ > 0.0 ? window_tokens_ / window_seconds_ / greedy_rate : 0.0;
        const bool slower = window_seconds_ > 0.0 && judged < 1.0 - tolerance;
        if (slower) {
            backoff_ = static_cast<int64_t>(options_.probe_after) << std::min(failed_, 4);
            ++failed_;
            probing_ = false;
            switch_to(step, planner_.evaluate(std::nullopt), "fallback", judged, greedy_s);
            return current_;
        }
        failed_ = 0;
        probing_ = false;
        const PlanChoice best = planner_.plan(max_tokens_, options_.min_gain);
        // The switch margin keeps a config against small predicted gains. A config that the
        // acceptance model predicted (chosen before any replay, or a window) gets no such
        // protection once the plan prefers a replayed one: plan() already found that it does not
        // beat the counted config by min_gain.
        const bool counted_over_predicted =
            best.config && planner_.replayed(*best.config) && !planner_.replayed(*current_);
        if (!best.config) {
            backoff_ = 0;
            switch_to(step, best, "plan", judged, greedy_s);
        } else if (!same_shape(best.config, current_) &&
                   (counted_over_predicted ||
                    best.speedup > planner_.evaluate(current_).speedup * (1.0 + kSwitchMargin))) {
            switch_to(step, best, "plan", judged, greedy_s);
        } else {
            steps_since_check_ = 0;
            judge_after_ = options_.replan_interval;
        }
        return current_;
    }
    // Greedy: re-plan every replan_interval steps, but not before the back-off after a fallback.
    if (steps_since_check_ >= options_.replan_interval && steps_in_mode_ >= backoff_) {
        steps_since_check_ = 0;
        const PlanChoice best = planner_.plan(max_tokens_, options_.min_gain);
        if (best.config) {
            probing_ = backoff_ > 0;
            switch_to(step, best, probing_ ? "probe" : "plan");
        }
    }
    return current_;
}

void AutoController::after_step(const StepReport& r) {
    ++steps_in_mode_;
    ++steps_since_check_;
    planner_.costs().observe(r.tokens_per_step, r.seconds);
    if (current_) {
        const double decay = std::exp2(-1.0 / kJudgeHalfLife);
        window_tokens_ = window_tokens_ * decay + r.tokens;
        window_seconds_ = window_seconds_ * decay + r.seconds;
        const bool one_row = r.tokens_per_step == 1;
        window_greedy_steps_ = window_greedy_steps_ * decay + (one_row ? 1.0 : 0.0);
        window_greedy_seconds_ = window_greedy_seconds_ * decay + (one_row ? r.seconds : 0.0);
        planner_.observe_lookahead_step(*current_, r.tokens, current_model_tokens_,
                                        current_replayed_);
        planner_.acceptance().observe_window(current_->window_size, r.window_candidates,
                                             current_->ngram_size - 1, r.window_matched);
    }
}

}  // namespace pylookahead
