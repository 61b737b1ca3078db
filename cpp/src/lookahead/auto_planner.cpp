#include "lookahead/auto_planner.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "check.h"
#include "pylookahead/errors.h"

namespace pylookahead {

namespace {

double median(std::vector<double> v) {
    PYLA_CHECK(!v.empty(), "median of nothing");
    const size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + mid, v.end());
    double m = v[mid];
    if (v.size() % 2 == 0) {
        m = 0.5 * (m + *std::max_element(v.begin(), v.begin() + mid));
    }
    return m;
}

void push_capped(std::deque<double>* q, double value, size_t keep) {
    q->push_back(value);
    while (q->size() > keep) q->pop_front();
}

}  // namespace

bool same_shape(const std::optional<LookaheadConfig>& a, const std::optional<LookaheadConfig>& b) {
    if (a.has_value() != b.has_value()) return false;
    if (!a) return true;
    return a->window_size == b->window_size && a->ngram_size == b->ngram_size &&
           a->verification_set_size == b->verification_set_size && a->tree_rows == b->tree_rows &&
           a->suffix_branches == b->suffix_branches && a->recycle_top_k == b->recycle_top_k;
}

// ---- StepCostModel -----------------------------------------------------------------------------

void StepCostModel::set_table(std::vector<StepCost> table) {
    if (table.empty()) throw ConfigError("step cost table must not be empty");
    std::sort(table.begin(), table.end(),
              [](const StepCost& a, const StepCost& b) { return a.tokens < b.tokens; });
    for (size_t i = 0; i < table.size(); ++i) {
        const StepCost& c = table[i];
        if (c.tokens < 1 || c.tokens > 4096) {
            throw ConfigError("step cost tokens must be in [1, 4096] (got " +
                              std::to_string(c.tokens) + ")");
        }
        if (!(c.seconds > 0.0) || !std::isfinite(c.seconds)) {
            throw ConfigError("step cost seconds must be finite and > 0 (got " +
                              std::to_string(c.seconds) + " for " + std::to_string(c.tokens) +
                              " tokens)");
        }
        if (i > 0 && table[i - 1].tokens == c.tokens) {
            throw ConfigError("step cost table lists " + std::to_string(c.tokens) +
                              " tokens twice");
        }
    }
    if (table.front().tokens != 1) {
        throw ConfigError("step cost table must have an entry for 1 token (a greedy step); "
                          "smallest given: " + std::to_string(table.front().tokens));
    }
    table_ = std::move(table);
    clear_measurements();
}

double StepCostModel::table_seconds(int tokens) const {
    PYLA_CHECK(!table_.empty(), "no step cost table");
    const double floor = 0.01 * table_.front().seconds;
    if (table_.size() == 1 || tokens <= table_.front().tokens) return table_.front().seconds;
    size_t hi = 1;
    while (hi + 1 < table_.size() && table_[hi].tokens < tokens) ++hi;
    const StepCost& a = table_[hi - 1];
    const StepCost& b = table_[hi];
    const double slope = (b.seconds - a.seconds) / static_cast<double>(b.tokens - a.tokens);
    return std::max(floor, a.seconds + slope * static_cast<double>(tokens - a.tokens));
}

void StepCostModel::observe(int tokens, double seconds) {
    if (!(seconds > 0.0) || !std::isfinite(seconds)) return;
    // The medians are kept here, once per step, since the planner reads seconds() for many T.
    std::deque<double>& m = measured_[tokens];
    push_capped(&m, seconds, kKeep);
    if (static_cast<int>(m.size()) >= kMinSamples) {
        measured_median_[tokens] = median(std::vector<double>(m.begin(), m.end()));
    }
    if (tokens == 1 && !table_.empty()) {
        push_capped(&ratios_, seconds / table_seconds(1), kKeep);
        drift_ = median(std::vector<double>(ratios_.begin(), ratios_.end()));
    }
}

int StepCostModel::samples(int tokens) const {
    auto it = measured_.find(tokens);
    return it == measured_.end() ? 0 : static_cast<int>(it->second.size());
}

double StepCostModel::drift() const { return drift_; }

double StepCostModel::seconds(int tokens) const {
    auto it = measured_median_.find(tokens);
    if (it != measured_median_.end()) return it->second;
    return table_seconds(tokens) * drift_;
}

void StepCostModel::clear_measurements() {
    measured_.clear();
    measured_median_.clear();
    ratios_.clear();
    drift_ = 1.0;
}

// ---- Acceptance --------------------------------------------------------------------------------

double expected_step_tokens(int gamma, double b_history, double alpha_history, double b_window,
                            double alpha_window) {
    double e = gamma + 1.0;
    double ph = 1.0, pw = 1.0;  // alpha^i
    for (int i = 1; i <= gamma; ++i) {
        ph *= alpha_history;
        pw *= alpha_window;
        double miss = 1.0;
        if (b_history > 0.0) miss *= std::pow(1.0 - ph, b_history);
        if (b_window > 0.0) miss *= std::pow(1.0 - pw, b_window);
        e -= miss;
    }
    return e;
}

void AlphaFit::observe(int b, int gamma, int matched, double weight) {
    if (b <= 0 || gamma <= 0 || weight <= 0.0) return;
    matched = std::clamp(matched, 0, gamma);
    auto& bucket = buckets_[{b, gamma}];
    bucket.first += weight;
    bucket.second += weight * (matched + 1.0);
    total_weight_ += weight;
    if (total_weight_ > max_weight_) {  // older observations fade: keep the mean, cap the weight
        const double scale = max_weight_ / total_weight_;
        for (auto& kv : buckets_) {
            kv.second.first *= scale;
            kv.second.second *= scale;
        }
        total_weight_ = max_weight_;
    }
    cached_.reset();
}

double AlphaFit::alpha() const {
    if (cached_) return *cached_;
    double fitted = prior_alpha_;
    if (total_weight_ > 0.0) {
        auto excess = [&](double a) {  // model mean - observed mean, increasing in a
            double d = 0.0;
            for (const auto& kv : buckets_) {
                const auto [b, gamma] = kv.first;
                d += kv.second.first * expected_step_tokens(gamma, b, a, 0.0, 0.0) - kv.second.second;
            }
            return d;
        };
        if (excess(0.0) >= 0.0) {
            fitted = 0.0;
        } else if (excess(1.0) <= 0.0) {
            fitted = 1.0;
        } else {
            double lo = 0.0, hi = 1.0;
            for (int it = 0; it < 40; ++it) {
                const double mid = 0.5 * (lo + hi);
                (excess(mid) < 0.0 ? lo : hi) = mid;
            }
            fitted = 0.5 * (lo + hi);
        }
    }
    const double a =
        (prior_weight_ * prior_alpha_ + total_weight_ * fitted) / (prior_weight_ + total_weight_);
    cached_ = a;
    return a;
}

namespace {
// Priors (pseudo-observations), used until the session's own text outweighs them.
constexpr double kHistoryAlphaPrior = 0.3, kHistoryAlphaWeight = 8.0, kHistoryMaxWeight = 512.0;
constexpr double kWindowAlphaPrior = 0.2, kWindowAlphaWeight = 8.0, kWindowMaxWeight = 256.0;
constexpr double kKappaPrior = 0.5, kKappaWeight = 8.0, kKappaMaxUnits = 256.0;
// History candidate counts: half the keys have none, the rest one or two.
constexpr double kCountPrior[3] = {4.0, 2.0, 2.0};

double window_units(int window_size) { return 1.0 + std::log2(static_cast<double>(window_size)); }
}  // namespace

AcceptanceModel::AcceptanceModel()
    : history_alpha_(kHistoryAlphaPrior, kHistoryAlphaWeight, kHistoryMaxWeight),
      window_alpha_(kWindowAlphaPrior, kWindowAlphaWeight, kWindowMaxWeight),
      count_weight_(kMaxCount + 1, 0.0) {}

void AcceptanceModel::observe_history(int count, int gamma, int matched, double weight) {
    if (weight <= 0.0) return;
    count = std::clamp(count, 0, kMaxCount);
    count_weight_[count] += weight;
    count_total_ += weight;
    if (count_total_ > kHistoryMaxWeight) {
        const double scale = kHistoryMaxWeight / count_total_;
        for (double& w : count_weight_) w *= scale;
        count_total_ = kHistoryMaxWeight;
    }
    if (count > 0) history_alpha_.observe(count, gamma, matched, weight);
}

void AcceptanceModel::observe_window(int window_size, int count, int gamma, int matched) {
    if (window_size <= 0) return;  // verification-only step: nothing about the window
    window_count_sum_ += std::max(count, 0);
    window_count_units_ += window_units(std::max(window_size, 1));
    if (window_count_units_ > kKappaMaxUnits) {
        const double scale = kKappaMaxUnits / window_count_units_;
        window_count_sum_ *= scale;
        window_count_units_ = kKappaMaxUnits;
    }
    if (count > 0) window_alpha_.observe(count, gamma, matched, 1.0);
}

double AcceptanceModel::count_weight(int c) const {
    return count_weight_[c] + (c < 3 ? kCountPrior[c] : 0.0);
}

double AcceptanceModel::count_weight_total() const {
    return kCountPrior[0] + kCountPrior[1] + kCountPrior[2] + count_total_;
}

double AcceptanceModel::history_hit_rate() const { return 1.0 - history_count_probability(0); }

double AcceptanceModel::history_count_probability(int count) const {
    if (count < 0 || count > kMaxCount) return 0.0;
    return count_weight(count) / count_weight_total();
}

double AcceptanceModel::verified_candidates(int window_size, int verification_set_size,
                                            int history_count) const {
    const double G = verification_set_size;
    const double b_h = std::min<double>(history_count, G);
    return b_h + std::min(window_candidates(window_size), G - b_h);
}

double AcceptanceModel::window_candidates(int window_size) const {
    if (window_size <= 0) return 0.0;
    const double kappa = (kKappaPrior * kKappaWeight + window_count_sum_) /
                         (kKappaWeight + window_count_units_);
    return kappa * window_units(window_size);
}

double AcceptanceModel::tokens_per_step(int window_size, int ngram_size,
                                        int verification_set_size) const {
    const int gamma = ngram_size - 1;
    const double G = verification_set_size;
    const double a_h = alpha_history();
    const double a_w = alpha_window();
    const double c_w = window_candidates(window_size);
    double s = 0.0;
    for (int c = 0; c <= kMaxCount; ++c) {
        const double w = count_weight(c);
        if (w <= 0.0) continue;
        const double b_h = std::min<double>(c, G);
        const double b_w = std::min(c_w, G - b_h);  // the pool keeps G n-grams per key
        s += w * expected_step_tokens(gamma, b_h, a_h, b_w, a_w);
    }
    return s / count_weight_total();
}

// ---- AutoPlanner -------------------------------------------------------------------------------

namespace {
constexpr double kRealizedPrior = 8.0;  // pseudo-steps of the model's value per config
constexpr double kRealizedMax = 64.0;
constexpr double kBiasPrior = 4.0;     // pseudo tokens of gain, realized as predicted
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
        std::stable_sort(out.begin(), out.end(), [](const LookaheadConfig& a, const LookaheadConfig& b) {
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
        const double b = acceptance_.verified_candidates(config.window_size,
                                                         config.verification_set_size,
                                                         static_cast<int>(c));
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

// ---- HistoryShadow -----------------------------------------------------------------------------

HistoryShadow::HistoryShadow(int gamma) : gamma_(gamma) {
    for (const LookaheadConfig& c : AutoPlanner::candidate_configs()) {
        if (c.window_size != 0 || c.ngram_size - 1 > gamma_) continue;
        replays_.push_back(Replay{c.ngram_size, c.verification_set_size});
        max_replay_g_ = std::max(max_replay_g_, c.verification_set_size);
    }
    for (int len = 1; len <= gamma_; ++len) {
        replay_pools_.emplace_back(len, NgramPool::kept_per_key(max_replay_g_));
    }
    // The gamma-gram pool also serves the acceptance model's lookups, which count up to
    // kMaxCount candidates per key.
    PYLA_CHECK(replay_pools_.back().capacity() == AcceptanceModel::kMaxCount,
               "shadow pool keeps " << replay_pools_.back().capacity() << " per key, not "
                                    << AcceptanceModel::kMaxCount);
    ranked_.assign(static_cast<size_t>(gamma_) * kRing, {});
}

void HistoryShadow::start(const std::vector<TokenId>& prompt, AcceptanceModel* model,
                          ReplayStats* replay, double prompt_weight, bool keep_pools) {
    if (!keep_pools) clear_pools();
    history_.clear();
    pending_.clear();
    for (Replay& r : replays_) r.next_key = 0;
    for (TokenId t : prompt) push(t, model, replay, prompt_weight);
    // The generation's first step takes the first emitted token (the next push) as its input,
    // like a real run: realign every replay there.
    for (Replay& r : replays_) r.next_key = static_cast<int64_t>(prompt.size());
}

void HistoryShadow::clear_pools() {
    for (NgramPool& p : replay_pools_) p.clear();
}

void HistoryShadow::seed_pools(const SharedPool& source) {
    for (NgramPool& p : replay_pools_) p = source.pool_from_texts(p.ngram_len(), p.capacity());
}

void HistoryShadow::push(TokenId token, AcceptanceModel* model, ReplayStats* replay,
                         double weight) {
    history_.push_back(token);
    const int64_t idx = static_cast<int64_t>(history_.size()) - 1;
    // The n-grams that end here go in the pools first, as LookaheadAlgorithm seeds them.
    TokenId context[NgramPool::kContextLen];
    for (int len = 1; len <= gamma_ && len <= idx; ++len) {
        const int64_t key = idx - len;
        NgramPool::context_before(history_.data(), key, context);
        replay_pools_[len - 1].insert(history_[key], history_.data() + key + 1, NgramSource::kSeed,
                                      context);
    }
    // Lookups whose continuation is now known.
    while (!pending_.empty() && pending_.front().index + gamma_ <= idx) {
        const Pending& p = pending_.front();
        int best = 0;
        for (int c = 0; c < p.count; ++c) {
            int m = 0;
            while (m < gamma_ && p.tokens[c * gamma_ + m] == history_[p.index + 1 + m]) ++m;
            best = std::max(best, m);
        }
        model->observe_history(p.count, gamma_, best, p.weight);
        pending_.pop_front();
    }
    const NgramPool::Candidates cands = replay_pools_[gamma_ - 1].find(token);
    pending_.push_back(Pending{idx, cands.count, weight,
                               std::vector<TokenId>(cands.tokens, cands.tokens + cands.count * gamma_)});
    // This key's candidates in every replay pool, best first, as a step on it would pick them.
    NgramPool::context_before(history_.data(), idx, context);
    for (int len = 1; len <= gamma_; ++len) {
        const NgramPool::Candidates c =
            replay_pools_[len - 1].select(token, context, max_replay_g_, &order_);
        std::vector<TokenId>& ranked = ranked_[static_cast<size_t>(len - 1) * kRing + idx % kRing];
        ranked.clear();
        for (int i : order_) {
            ranked.insert(ranked.end(), c.tokens + static_cast<size_t>(i) * len,
                          c.tokens + static_cast<size_t>(i + 1) * len);
        }
    }
    step_replays(idx, replay, weight);
}

void HistoryShadow::step_replays(int64_t idx, ReplayStats* replay, double weight) {
    for (Replay& r : replays_) {
        const int len = r.ngram_size - 1;
        const int64_t key = r.next_key;
        if (idx != key + len) continue;  // its step's candidates are checked once all are known
        const std::vector<TokenId>& ranked =
            ranked_[static_cast<size_t>(len - 1) * kRing + key % kRing];
        const int count = std::min(static_cast<int>(ranked.size()) / len, r.verification_set_size);
        int best = 0;
        for (int c = 0; c < count; ++c) {
            const TokenId* cand = ranked.data() + static_cast<size_t>(c) * len;
            int m = 0;
            while (m < len && cand[m] == history_[key + 1 + m]) ++m;
            best = std::max(best, m);
        }
        replay->record(r.ngram_size, r.verification_set_size, best + 1, count, weight);
        r.next_key = key + best + 1;
    }
}

// ---- ReplayStats -------------------------------------------------------------------------------

void ReplayStats::record(int ngram_size, int verification_set_size, int tokens, int candidates,
                         double weight) {
    Entry& e = entries_[{ngram_size, verification_set_size}];
    if (e.counts.empty()) e.counts.assign(verification_set_size + 1, 0.0);
    e.steps += weight;
    e.tokens += weight * tokens;
    e.counts[std::clamp(candidates, 0, verification_set_size)] += weight;
    if (e.steps > kMaxSteps) {
        const double scale = kMaxSteps / e.steps;
        e.steps = kMaxSteps;
        e.tokens *= scale;
        for (double& c : e.counts) c *= scale;
    }
}

double ReplayStats::steps(int ngram_size, int verification_set_size) const {
    auto it = entries_.find({ngram_size, verification_set_size});
    return it == entries_.end() ? 0.0 : it->second.steps;
}

double ReplayStats::tokens_per_step(int ngram_size, int verification_set_size) const {
    auto it = entries_.find({ngram_size, verification_set_size});
    if (it == entries_.end() || it->second.steps <= 0.0) return 1.0;
    return it->second.tokens / it->second.steps;
}

std::vector<double> ReplayStats::candidate_counts(int ngram_size, int verification_set_size) const {
    auto it = entries_.find({ngram_size, verification_set_size});
    return it == entries_.end() ? std::vector<double>{} : it->second.counts;
}

// ---- AutoController ----------------------------------------------------------------------------

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
    for (int i = 0; i < n; ++i) shadow_->push(tokens[i], &planner_.acceptance(), &planner_.replay());
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

std::optional<LookaheadConfig> AutoController::next_step(int64_t step) {
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
        const bool counted_over_predicted = best.config && planner_.replayed(*best.config) &&
                                            !planner_.replayed(*current_);
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
