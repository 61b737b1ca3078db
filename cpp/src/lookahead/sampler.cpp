#include "lookahead/sampler.h"

#include <algorithm>
#include <cmath>

#include "check.h"

namespace pylookahead {

namespace {

uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

}  // namespace

double uniform_at(uint64_t seed, int64_t position) {
    const uint64_t bits = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(position)));
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

TokenSampler::TokenSampler(const GenerationConfig& config)
    : temperature_(config.temperature),
      top_k_(config.top_k),
      top_p_(config.top_p),
      seed_(config.seed) {}

TokenId TokenSampler::sample(const float* logits, int vocab, int64_t position) {
    PYLA_CHECK(vocab >= 1, "vocab " << vocab);
    // The first largest logit; NaN logits are skipped (and never drawn below).
    int best = -1;
    for (int i = 0; i < vocab; ++i) {
        if (!std::isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
    }
    if (best < 0) return 0;  // all NaN: nothing to choose from
    if (temperature_ == 0.0) return best;
    const double max_logit = logits[best];
    const double inv_t = 1.0 / temperature_;
    weights_.resize(vocab);
    for (int i = 0; i < vocab; ++i) {
        // NaN logits get weight 0 (never drawn); -inf gives exp(-inf) = 0 as well.
        const double w = std::exp((static_cast<double>(logits[i]) - max_logit) * inv_t);
        weights_[i] = std::isnan(w) ? 0.0 : w;
    }
    // Descending weight, ties to the lower id: a total order, so the kept set and its order do
    // not depend on the sort algorithm.
    auto heavier = [this](int32_t a, int32_t b) {
        return weights_[a] != weights_[b] ? weights_[a] > weights_[b] : a < b;
    };
    const bool use_k = top_k_ > 0 && top_k_ < vocab;
    const bool use_p = top_p_ < 1.0;
    int kept = vocab;
    ids_.clear();
    if (use_k || use_p) {
        ids_.resize(vocab);
        for (int i = 0; i < vocab; ++i) ids_[i] = i;
        if (use_k) kept = top_k_;
        double total = 0.0;
        if (use_p) {
            // Sort only as many of the heaviest tokens as top-p needs: grow the sorted prefix
            // until its mass reaches top_p of the (top-k) total.
            if (use_k) {
                std::nth_element(ids_.begin(), ids_.begin() + kept, ids_.end(), heavier);
            }
            for (int i = 0; i < kept; ++i) total += weights_[ids_[i]];
            int sorted = std::min(kept, 64);
            for (;;) {
                std::partial_sort(ids_.begin(), ids_.begin() + sorted, ids_.begin() + kept,
                                  heavier);
                double mass = 0.0;
                int cut = 0;
                while (cut < sorted) {
                    mass += weights_[ids_[cut++]];
                    if (mass >= top_p_ * total) break;
                }
                if (mass >= top_p_ * total || sorted == kept) {
                    kept = std::max(cut, 1);
                    break;
                }
                sorted = std::min(kept, sorted * 4);
            }
        } else {
            std::partial_sort(ids_.begin(), ids_.begin() + kept, ids_.end(), heavier);
        }
    }
    double total = 0.0;
    for (int i = 0; i < kept; ++i) total += weights_[ids_.empty() ? i : ids_[i]];
    const double target = uniform_at(seed_, position) * total;
    double running = 0.0;
    int last_positive = best;
    for (int i = 0; i < kept; ++i) {
        const int id = ids_.empty() ? i : ids_[i];
        if (weights_[id] <= 0.0) continue;
        running += weights_[id];
        last_positive = id;
        if (running > target) return id;
    }
    return last_positive;  // rounding left target at the very end of the mass
}

}  // namespace pylookahead
