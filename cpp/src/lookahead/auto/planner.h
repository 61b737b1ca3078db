// The automatic planner (std-only): a Session's step-cost, acceptance and replay models, and the
// choice among a fixed set of configs of the one with the best predicted tokens/s, or greedy.
#pragma once

#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "lookahead/auto/acceptance_model.h"
#include "lookahead/auto/replay_stats.h"
#include "lookahead/auto/step_cost_model.h"
#include "pylookahead/config.h"

namespace pylookahead {

// True if both are greedy (nullopt) or both have the same W, N, G and tree options (seeds are not
// compared).
bool same_shape(const std::optional<LookaheadConfig>& a, const std::optional<LookaheadConfig>& b);

// One evaluated choice.
struct PlanChoice {
    std::optional<LookaheadConfig> config;  // nullopt: greedy steps
    double expected_tokens = 1.0;           // per step
    double seconds_per_step = 0.0;
    double speedup = 1.0;  // predicted tokens/s over greedy's
};

// The models of one Session plus the choice among a fixed set of configs.
class AutoPlanner {
  public:
    AutoPlanner() = default;

    // W in {1, 2, 4, 8, 16} x N in {3, 4, 5, 6} x G in {1, 2, 4, 8, 16}, plus the
    // verification-only W = 0 x N in {2, ..., 6} x G in {1, 2, 4, 8}; seed_from_prompt on.
    static const std::vector<LookaheadConfig>& candidate_configs();
    static constexpr int kMaxNgramSize = 6;  // largest N of candidate_configs()

    StepCostModel& costs() { return costs_; }
    const StepCostModel& costs() const { return costs_; }
    // Whether the model runs every step at its full (W + G)(N - 1) tokens (StepModel::
    // prefers_fixed_shapes, e.g. CUDA) or only the rows of the candidates it has (CPU: a W = 0
    // step without candidates costs a greedy step). Default false.
    void set_fixed_shapes(bool fixed) { fixed_shapes_ = fixed; }
    bool fixed_shapes() const { return fixed_shapes_; }
    // Expected seconds of one step of `config`: the cost at its full T with fixed shapes, else
    // the cost at the rows it runs (window + verified candidates) averaged over the history
    // candidate counts (for a replayed W = 0 config: over its replayed candidate counts).
    double step_seconds(const LookaheadConfig& config) const;
    AcceptanceModel& acceptance() { return acceptance_; }
    const AcceptanceModel& acceptance() const { return acceptance_; }
    ReplayStats& replay() { return replay_; }
    const ReplayStats& replay() const { return replay_; }
    // Replayed steps a W = 0 config needs before its replay replaces the acceptance model.
    static constexpr double kMinReplaySteps = 8.0;
    // Whether `config` is verification-only with enough replayed steps.
    bool replayed(const LookaheadConfig& config) const;
    // The gain a replayed W = 0 config needs over greedy without fixed shapes (see plan()).
    static constexpr double kCountedGain = 0.01;

    // A finished lookahead step of `config` that emitted `tokens` tokens, where model_tokens had
    // predicted `predicted` tokens per step for it when it was chosen (`from_replay`: that value
    // was a replay's; such steps do not move the model's bias).
    void observe_lookahead_step(const LookaheadConfig& config, int tokens, double predicted,
                                bool from_replay = false);
    // Tokens per step of `config` before any correction: the replayed value of a replayed W = 0
    // config; for a window whose verification_only_anchor is replayed, that replay's value plus
    // what the window candidates add by the acceptance model in the slots that the replay's
    // history candidates leave free (per candidate count it saw; capped at N); else the
    // acceptance model's.
    double model_tokens(const LookaheadConfig& config) const;
    // The verification-only config (0, N, min(G, kMaxReplayG)) whose replay stands for the
    // history candidates of `config`.
    static LookaheadConfig verification_only_anchor(const LookaheadConfig& config);
    // Largest G among the replayed (W = 0) candidate configs.
    static constexpr int kMaxReplayG = 8;
    // Expected tokens per step of `config`. A replayed W = 0 config: its replay's mean, as is (the
    // replay is what a run of it did on the same text). Otherwise 1 + rho * (model - 1) (at most
    // N), where rho = realized / predicted gain over the lookahead steps so far that the model
    // predicted (the model's bias, 1 a priori), then blended with what this very config achieved
    // when it ran (a running mean with a pseudo-count of that value).
    double expected_tokens(const LookaheadConfig& config) const;
    double model_bias() const;
    // Predicted figures of `config` (nullopt = greedy). Requires costs().has_table().
    PlanChoice evaluate(const std::optional<LookaheadConfig>& config) const;
    // The candidate with T <= max_tokens and the best predicted tokens/s, if the acceptance
    // model predicted it (a window, or a W = 0 config with too few replayed steps) and it beats
    // both greedy and the best replayed config by (1 + min_gain) x; else the best replayed config
    // if it beats greedy by (1 + kCountedGain) x ((1 + min_gain) x with fixed shapes); else
    // greedy. Requires costs().has_table().
    PlanChoice plan(int max_tokens, double min_gain) const;

  private:
    StepCostModel costs_;
    AcceptanceModel acceptance_;
    ReplayStats replay_;
    bool fixed_shapes_ = false;
    std::map<std::tuple<int, int, int>, std::pair<double, double>>
        realized_;                 // (W,N,G) -> (n, sum)
    double realized_gain_ = 0.0;   // sum over model-predicted lookahead steps of (tokens - 1)
    double predicted_gain_ = 0.0;  // sum over them of (model's tokens per step - 1)
};

}  // namespace pylookahead
