#include "lookahead/auto/planner.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "check.h"
#include "pylookahead/errors.h"

namespace pylookahead {

bool same_shape(const std::optional<LookaheadConfig>& a, const std::optional<LookaheadConfig>& b) {
    if (a.has_value() != b.has_value()) return false;
    if (!a) return true;
    return a->window_size == b->window_size && a->ngram_size == b->ngram_size &&
           a->verification_set_size == b->verification_set_size && a->tree_rows == b->tree_rows &&
           a->suffix_branches == b->suffix_branches && a->recycle_top_k == b->recycle_top_k;
}

namespace {
constexpr double kRealizedPrior = 8.0;  // pseudo-steps of the model's value per config
constexpr double kRealizedMax = 64.0;
constexpr double kBiasPrior = 4.0;      // pseudo tokens of gain, realized as predicted
constexpr double kBiasMaxGain = 256.0;  // predicted gain kept (older steps fade)
}  // namespace

const std::vector<LookaheadConfig>& AutoPlanner::candidate_configs() {
    static const std::vector<LookaheadConfig> configs = [] {
        std::vector<LookaheadConfig> out;
        auto add = [&out](int w, int n, int g) {
            LookaheadConfig c;
            c.window_size = w;
            c.ngram_size = n;
            c.verification_set_size = g;
            c.seed_from_prompt = true;
            out.push_back(c);
        };
        for (int w : {1, 2, 4, 8, 16}) {
            for (int n = 3; n <= kMaxNgramSize; ++n) {
                for (int g : {1, 2, 4, 8, 16}) add(w, n, g);
            }
        }
        for (int n = 2; n <= kMaxNgramSize; ++n) {
            for (int g = 1; g <= kMaxReplayG; g *= 2) add(0, n, g);
        }
        // Smallest T first: among equal predictions the cheaper config wins.
        std::stable_sort(out.begin(), out.end(),
                         [](const LookaheadConfig& a, const LookaheadConfig& b) {
                             return a.tokens_per_step() < b.tokens_per_step();
                         });
        return out;
    }();
    return configs;
}

void AutoPlanner::observe_lookahead_step(const LookaheadConfig& config, int tokens,
                                         double predicted, bool from_replay) {
    auto& r = realized_[{config.window_size, config.ngram_size, config.verification_set_size}];
    r.first += 1.0;
    r.second += tokens;
    if (r.first > kRealizedMax) {
        r.second *= kRealizedMax / r.first;
        r.first = kRealizedMax;
    }
    if (from_replay) return;  // a replay is no evidence about the acceptance model
    realized_gain_ += tokens - 1.0;
    predicted_gain_ += std::max(predicted - 1.0, 0.0);
    if (predicted_gain_ > kBiasMaxGain) {
        realized_gain_ *= kBiasMaxGain / predicted_gain_;
        predicted_gain_ = kBiasMaxGain;
    }
}

double AutoPlanner::model_bias() const {
    return (kBiasPrior + realized_gain_) / (kBiasPrior + predicted_gain_);
}

double AutoPlanner::model_tokens(const LookaheadConfig& config) const {
    const int n = config.ngram_size, g = config.verification_set_size;
    if (replayed(config)) return replay_.tokens_per_step(n, g);
    const LookaheadConfig anchor = verification_only_anchor(config);
    if (config.window_size == 0 || !replayed(anchor)) {
        return acceptance_.tokens_per_step(config.window_size, n, g);
    }
    // A window: its history candidates do what the replay of (0, N, G) did on this text, and the
    // model gives only what the window candidates add in the slots the history leaves free, for
    // each history candidate count the replay saw. The history part of the model alone ran up to
    // 0.15 tokens per step above the replay on HumanEval (Qwen2.5-Coder-0.5B bf16), and that
    // excess made windows look better than the counted configs.
    const std::vector<double> counts = replay_.candidate_counts(n, anchor.verification_set_size);
    const double a_h = acceptance_.alpha_history(), a_w = acceptance_.alpha_window();
    const double c_w = acceptance_.window_candidates(config.window_size);
    double increment = 0.0, total = 0.0;
    for (size_t c = 0; c < counts.size(); ++c) {
        const double b_h = static_cast<double>(c);
        const double b_w = std::min(c_w, std::max(g - b_h, 0.0));
        increment += counts[c] * (expected_step_tokens(n - 1, b_h, a_h, b_w, a_w) -
                                  expected_step_tokens(n - 1, b_h, a_h, 0.0, a_w));
        total += counts[c];
    }
    return std::min(replay_.tokens_per_step(n, anchor.verification_set_size) + increment / total,
                    static_cast<double>(n));
}

LookaheadConfig AutoPlanner::verification_only_anchor(const LookaheadConfig& config) {
    LookaheadConfig anchor = config;
    anchor.window_size = 0;
    anchor.verification_set_size = std::min(config.verification_set_size, kMaxReplayG);
    return anchor;
}

bool AutoPlanner::replayed(const LookaheadConfig& config) const {
    return config.window_size == 0 &&
           replay_.steps(config.ngram_size, config.verification_set_size) >= kMinReplaySteps;
}

double AutoPlanner::expected_tokens(const LookaheadConfig& config) const {
    // A replay is what a run of the config did on this very text: no correction applies.
    if (replayed(config)) return model_tokens(config);
    const double model = std::min(1.0 + model_bias() * (model_tokens(config) - 1.0),
                                  static_cast<double>(config.ngram_size));
    auto it = realized_.find({config.window_size, config.ngram_size, config.verification_set_size});
    if (it == realized_.end()) return model;
    return (kRealizedPrior * model + it->second.second) / (kRealizedPrior + it->second.first);
}

double AutoPlanner::step_seconds(const LookaheadConfig& config) const {
    if (fixed_shapes_) return costs_.seconds(config.tokens_per_step());
    // Rows run: x and the window, then N - 1 per verified candidate (cf. run_decode). The history
    // candidate counts are the replay's for a replayed config and for a window whose
    // verification-only anchor is replayed, else the acceptance model's. A fractional candidate
    // count (window candidates are an expectation) interpolates between the two neighbouring
    // row counts.
    const int len = config.ngram_size - 1;
    const int base = config.window_size == 0 ? 1 : config.window_size * len;
    std::vector<double> p;  // [c]: weight of c history candidates
    const LookaheadConfig anchor = verification_only_anchor(config);
    if (replayed(anchor)) {
        p = replay_.candidate_counts(anchor.ngram_size, anchor.verification_set_size);
    } else {
        for (int c = 0; c <= AcceptanceModel::kMaxCount; ++c) {
            p.push_back(acceptance_.history_count_probability(c));
        }
    }
    double s = 0.0, total = 0.0;
    for (size_t c = 0; c < p.size(); ++c) {
        if (p[c] <= 0.0) continue;
        const double b = acceptance_.verified_candidates(
            config.window_size, config.verification_set_size, static_cast<int>(c));
        const int lo = static_cast<int>(std::floor(b));
        const double frac = b - lo;
        double t = costs_.seconds(base + lo * len);
        if (frac > 0.0) t += frac * (costs_.seconds(base + (lo + 1) * len) - t);
        s += p[c] * t;
        total += p[c];
    }
    return s / total;
}

PlanChoice AutoPlanner::evaluate(const std::optional<LookaheadConfig>& config) const {
    PlanChoice c;
    c.config = config;
    const double greedy_s = costs_.seconds(1);
    if (!config) {
        c.expected_tokens = 1.0;
        c.seconds_per_step = greedy_s;
        c.speedup = 1.0;
        return c;
    }
    c.expected_tokens = expected_tokens(*config);
    c.seconds_per_step = step_seconds(*config);
    c.speedup = c.expected_tokens * greedy_s / c.seconds_per_step;
    return c;
}

PlanChoice AutoPlanner::plan(int max_tokens, double min_gain) const {
    PlanChoice best = evaluate(std::nullopt);
    const PlanChoice greedy = best;
    PlanChoice best_counted = greedy;  // the best replayed config (its tokens were counted)
    for (const LookaheadConfig& config : candidate_configs()) {
        if (config.tokens_per_step() > max_tokens) continue;
        PlanChoice c = evaluate(config);
        if (c.speedup > best.speedup) best = c;
        if (replayed(config) && c.speedup > best_counted.speedup) best_counted = c;
    }
    // The margins guard against a wrong prediction. A replayed verification-only config's
    // tokens were counted on the text, and where the rows it runs are its only extra cost (no
    // fixed shapes) it costs a greedy step whenever it has no candidate: it needs only to cover
    // the bookkeeping of a lookahead step, which the cost table does not see. A config predicted
    // by the acceptance model (a window, or too few replayed steps) must beat greedy and the best
    // counted config by min_gain.
    const double counted_gain = fixed_shapes_ ? min_gain : kCountedGain;
    const bool counted_ok = best_counted.config && best_counted.speedup >= 1.0 + counted_gain;
    if (best.config && !replayed(*best.config) &&
        best.speedup >= (1.0 + min_gain) * std::max(1.0, best_counted.speedup)) {
        return best;
    }
    return counted_ok ? best_counted : greedy;
}

}  // namespace pylookahead
