#include "lookahead/auto/acceptance_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "check.h"
#include "pylookahead/errors.h"

namespace pylookahead {

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
                d += kv.second.first * expected_step_tokens(gamma, b, a, 0.0, 0.0) -
                     kv.second.second;
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
    const double kappa =
        (kKappaPrior * kKappaWeight + window_count_sum_) / (kKappaWeight + window_count_units_);
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

}  // namespace pylookahead
