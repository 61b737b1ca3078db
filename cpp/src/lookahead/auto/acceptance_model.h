// The acceptance model of automatic lookahead (std-only): expected tokens per lookahead step for
// any (W, N, G), with per-token acceptance rates fitted to the session's own text. docs/auto.md,
// "The acceptance model".
#pragma once

#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace pylookahead {

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
    std::map<std::pair<int, int>, std::pair<double, double>>
        buckets_;  // (b, gamma) -> (w, w*tokens)
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
    double window_count_sum_ = 0.0;    // sum of observed window candidates
    double window_count_units_ = 0.0;  // sum of (1 + log2 W) over those steps
};

}  // namespace pylookahead
