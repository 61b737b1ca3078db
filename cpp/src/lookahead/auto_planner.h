// Automatic lookahead configuration, std-only (no model, no tensors): a cost model (seconds per
// step against tokens per step), an acceptance model (expected tokens per lookahead step for any
// (W, N, G), learned from the session's own text), the planner that combines them, and the
// controller that the decode loop asks before every step. docs/auto.md explains the decisions.
//
//   StepCostModel     calibrated table, interpolated in T, corrected by measured step times
//   AcceptanceModel   paper's E[#tokens] for b parallel speculations of length gamma, with the
//                     per-token acceptance rates fitted to observed accepted lengths
//   HistoryShadow     a free "prompt lookup" run alongside every generation: for each emitted
//                     token, how many history n-grams the pool offers and how far the best one
//                     matches; feeds AcceptanceModel without any forward pass. It also replays
//                     every verification-only (W = 0) candidate config step by step on the text
//                     (ReplayStats): those steps depend on the text alone, so their tokens per
//                     step and candidate counts are measured, not modelled
//   AutoPlanner       owns the two models (kept per Session, so they learn across calls) and
//                     picks the config with the best predicted tokens/s, or greedy
//   AutoController    per generation: plan, switch, fall back to greedy, probe again
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "lookahead/ngram_pool.h"
#include "pylookahead/config.h"
#include "pylookahead/types.h"

namespace pylookahead {

// True if both are greedy (nullopt) or both have the same W, N, G and tree options (seeds are not
// compared).
bool same_shape(const std::optional<LookaheadConfig>& a, const std::optional<LookaheadConfig>& b);

// Seconds of one decode step against its tokens per step T.
class StepCostModel {
  public:
    // `table`: ascending distinct tokens >= 1 (one entry must have tokens == 1), finite seconds
    // > 0. Throws ConfigError otherwise. Clears the measurements.
    void set_table(std::vector<StepCost> table);
    const std::vector<StepCost>& table() const { return table_; }
    bool has_table() const { return !table_.empty(); }
    // Largest T in the table (0 without a table).
    int max_tokens() const { return table_.empty() ? 0 : table_.back().tokens; }

    // Table seconds at T: piecewise linear between points, linear extrapolation beyond the last
    // two (never below 1% of the T = 1 cost). Requires has_table().
    double table_seconds(int tokens) const;

    // A measured step of T tokens.
    void observe(int tokens, double seconds);
    // Best estimate now: the median of the last measured steps of exactly T tokens when there
    // are at least kMinSamples, else table_seconds(T) * drift(), where drift is the median
    // measured / table ratio of the last greedy (T = 1) steps, 1 before any. So the table's
    // shape holds until a T is measured, its scale follows the greedy steps, and a measured
    // lookahead step is always compared with the greedy cost measured or calibrated, never with
    // one rescaled from lookahead steps themselves.
    double seconds(int tokens) const;
    double drift() const;
    int samples(int tokens) const;
    void clear_measurements();

    static constexpr int kMinSamples = 3;
    static constexpr int kKeep = 32;

  private:
    std::vector<StepCost> table_;
    std::map<int, std::deque<double>> measured_;  // T -> last kKeep step seconds
    std::map<int, double> measured_median_;       // T -> median of measured_[T] (>= kMinSamples)
    std::deque<double> ratios_;                   // last kKeep greedy measured / table_seconds(1)
    double drift_ = 1.0;                          // median of ratios_ (1 when empty)
};

// E[#tokens] of one lookahead step (spec 10.4): b parallel speculations of gamma tokens, each
// token accepted with probability alpha given the previous ones, plus the bonus token:
//   E = (gamma + 1) - sum_{i=1..gamma} (1 - alpha^i)^b.
// Here the candidates come in two groups (history n-grams and Jacobi-window n-grams) with their
// own rates: the product (1 - a_h^i)^b_h (1 - a_w^i)^b_w is the chance that none reaches depth i.
// b may be fractional (an expected count). b = 0 or alpha = 0 gives 1.
double expected_step_tokens(int gamma, double b_history, double alpha_history, double b_window,
                            double alpha_window);

// Fits alpha to observations (b, gamma, tokens = matched + 1) so that the model's mean equals
// the observed mean; observations are weighted and the total weight is capped (older ones fade).
class AlphaFit {
  public:
    AlphaFit(double prior_alpha, double prior_weight, double max_weight)
        : prior_alpha_(prior_alpha), prior_weight_(prior_weight), max_weight_(max_weight) {}
    void observe(int b, int gamma, int matched, double weight);
    // Fitted alpha blended with the prior: (w0 * a0 + W * a_fit) / (w0 + W).
    double alpha() const;
    double weight() const { return total_weight_; }

  private:
    double prior_alpha_, prior_weight_, max_weight_;
    std::map<std::pair<int, int>, std::pair<double, double>> buckets_;  // (b, gamma) -> (w, w*tokens)
    double total_weight_ = 0.0;
    mutable std::optional<double> cached_;
};

// What the session's text says about acceptance. See docs/auto.md, "The acceptance model".
class AcceptanceModel {
  public:
    static constexpr int kMaxCount = 16;  // history candidate counts are capped here (max G)

    AcceptanceModel();
    // One position of the history shadow: the pool offered `count` history n-grams for the key
    // (0 allowed) and the best one matched `matched` of its `gamma` tokens.
    void observe_history(int count, int gamma, int matched, double weight = 1.0);
    // One lookahead step with window size W: `count` of the verified candidates came from the
    // Jacobi window, and the best of them matched `matched` of gamma tokens.
    void observe_window(int window_size, int count, int gamma, int matched);

    double alpha_history() const { return history_alpha_.alpha(); }
    double alpha_window() const { return window_alpha_.alpha(); }
    // P(the history pool offers at least one candidate for the key).
    double history_hit_rate() const;
    // P(the history pool offers exactly `count` candidates for the key), count in
    // [0, kMaxCount] (the last one stands for kMaxCount or more); priors included.
    double history_count_probability(int count) const;
    // Expected window candidates for the key with window size W: kappa * (1 + log2 W); 0 for
    // W = 0.
    double window_candidates(int window_size) const;
    // Expected tokens per lookahead step (the compression S) of (W, N, G).
    double tokens_per_step(int window_size, int ngram_size, int verification_set_size) const;
    // Expected candidates a step of (W, N, G) verifies when the history offers `history_count`:
    // min(history_count + window candidates, G).
    double verified_candidates(int window_size, int verification_set_size, int history_count) const;
    double history_weight() const { return history_alpha_.weight(); }

  private:
    AlphaFit history_alpha_;
    AlphaFit window_alpha_;
    // Weight of count c in P(c), prior included, and the total over all counts.
    double count_weight(int c) const;
    double count_weight_total() const;

    std::vector<double> count_weight_;  // [kMaxCount + 1] history candidate count histogram
    double count_total_ = 0.0;
    double window_count_sum_ = 0.0;     // sum of observed window candidates
    double window_count_units_ = 0.0;   // sum of (1 + log2 W) over those steps
};

// What the verification-only configs (W = 0, N, G) would have done on the session's text, as
// replayed by HistoryShadow: per (N, G) weighted steps, emitted tokens and how many steps verified
// c candidates. Older steps fade: a config's total weight is capped at kMaxSteps.
class ReplayStats {
  public:
    static constexpr double kMaxSteps = 256.0;
    // A replayed step of (N, G) that emitted `tokens` and verified `candidates` (<= G).
    void record(int ngram_size, int verification_set_size, int tokens, int candidates, double weight);
    double steps(int ngram_size, int verification_set_size) const;
    // Mean emitted tokens per step (1 before any step).
    double tokens_per_step(int ngram_size, int verification_set_size) const;
    // Weighted step counts by verified candidates ([G + 1]), empty before any step.
    std::vector<double> candidate_counts(int ngram_size, int verification_set_size) const;
    void clear() { entries_.clear(); }

  private:
    struct Entry {
        double steps = 0.0;
        double tokens = 0.0;
        std::vector<double> counts;  // [G + 1]
    };
    std::map<std::pair<int, int>, Entry> entries_;
};

// One evaluated choice.
struct PlanChoice {
    std::optional<LookaheadConfig> config;  // nullopt: greedy steps
    double expected_tokens = 1.0;           // per step
    double seconds_per_step = 0.0;
    double speedup = 1.0;                   // predicted tokens/s over greedy's
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
    std::map<std::tuple<int, int, int>, std::pair<double, double>> realized_;  // (W,N,G) -> (n, sum)
    double realized_gain_ = 0.0;   // sum over model-predicted lookahead steps of (tokens - 1)
    double predicted_gain_ = 0.0;  // sum over them of (model's tokens per step - 1)
};

// The "prompt lookup" that the history part of the pool would do, run on the side for free. It
// keeps its own pool of every n-gram (gamma + 1 tokens) of the prompt and emitted text, with
// contexts, at most kMaxCount per key; for each new token it notes the candidates for it as a key
// and, gamma tokens later, how far the best of them matched, into an AcceptanceModel.
//
// It also replays the verification-only configs (W = 0, N, G) of AutoPlanner::candidate_configs
// on the same text, into ReplayStats: one pool per n-gram length, filled as LookaheadAlgorithm
// seeds its own, and each replay steps from key to key as a real run would (the G best entries
// by NgramPool::select, the longest match plus the bonus token). Within one generation a replay
// takes the same steps as a real run of that config (a test checks it); a real run that keeps a
// pool across calls starts from more n-grams than the replay, which starts from the prompt.
class HistoryShadow {
  public:
    explicit HistoryShadow(int gamma = AutoPlanner::kMaxNgramSize - 1);
    // Starts a generation: pushes the prompt with weight `prompt_weight` per observation (the
    // replays step through it too), then lines the replays up on the first emitted token.
    // `keep_pools`: the replay pools keep the n-grams of earlier generations, as a real run with
    // GenerationConfig::keep_pool keeps its pool; otherwise they start empty.
    void start(const std::vector<TokenId>& prompt, AcceptanceModel* model, ReplayStats* replay,
               double prompt_weight, bool keep_pools = false);
    // Empties the replay pools (Session::reset).
    void clear_pools();
    // Replaces the replay pools with every n-gram of `source`'s texts (Session::load_pool,
    // share_pool; the caller holds its mutex), as a real run that keeps that pool rebuilds it
    // from them for a larger N. N-grams a pool holds beyond its texts (Jacobi-window ones, or
    // text older than SharedPool::kMaxTextTokens) stay unseen.
    void seed_pools(const SharedPool& source);
    // One emitted token (weight 1).
    void push(TokenId token, AcceptanceModel* model, ReplayStats* replay) {
        push(token, model, replay, 1.0);
    }

  private:
    void push(TokenId token, AcceptanceModel* model, ReplayStats* replay, double weight);
    void step_replays(int64_t idx, ReplayStats* replay, double weight);
    struct Pending {
        int64_t index;                  // history index of the key
        int count;                      // candidates offered
        double weight;
        std::vector<TokenId> tokens;    // [count * gamma]
    };
    struct Replay {
        int ngram_size, verification_set_size;
        int64_t next_key = 0;  // history index of its next step's input token
    };
    static constexpr int kRing = 8;  // > kMaxNgramSize: selections kept for the last keys
    int gamma_;
    std::vector<TokenId> history_;
    std::deque<Pending> pending_;
    std::vector<Replay> replays_;
    int max_replay_g_ = 0;
    // [gamma]: n-gram length len at len - 1; the last one also feeds the acceptance model.
    std::vector<NgramPool> replay_pools_;
    std::vector<std::vector<TokenId>> ranked_;  // [gamma * kRing]: (len, key idx) -> best entries
    std::vector<int> order_;
};

// What the decode loop reports after each step to a StepPolicy.
struct StepReport {
    int64_t step = 0;
    double seconds = 0.0;        // wall time of the step
    int tokens = 1;              // tokens it emitted (kept, after any stop)
    int tokens_per_step = 1;     // T of its forward pass
    int num_candidates = 0;      // lookahead: candidates verified
    int window_candidates = 0;   // lookahead: of them from the Jacobi window
    int window_matched = 0;      // lookahead: best match of a window candidate
};

// Chooses the configuration of every step of one generation (the decode loop's auto mode). The
// loop calls start() after prefill, then for every step next_step() and after_step(), and
// on_emitted() for every emitted token (the prefill's first included).
class StepPolicy {
  public:
    virtual ~StepPolicy() = default;
    // Most tokens per step it may ask for (the loop checks the KV room for it).
    virtual int max_tokens_per_step() const = 0;
    // Largest N it may ask for (sizes the accept histogram).
    virtual int max_ngram_size() const = 0;
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
    int max_ngram_size() const override { return AutoPlanner::kMaxNgramSize; }
    void start(const std::vector<TokenId>& prompt) override;
    void on_emitted(const TokenId* tokens, int n) override;
    std::optional<LookaheadConfig> next_step(int64_t step) override;
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

  private:
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
    int64_t backoff_ = 0;            // greedy steps to wait after a fallback (0 = none)
    int failed_ = 0;                 // consecutive lookahead runs judged slower than greedy
    bool probing_ = false;           // the current lookahead run follows a fallback
};

}  // namespace pylookahead
