// What replayed verification-only configs did on the session's text (std-only), the measured
// counterpart of the acceptance model for W = 0 configs.
#pragma once

#include <map>
#include <utility>
#include <vector>

namespace pylookahead {

// What the verification-only configs (W = 0, N, G) would have done on the session's text, as
// replayed by HistoryShadow: per (N, G) weighted steps, emitted tokens and how many steps verified
// c candidates. Older steps fade: a config's total weight is capped at kMaxSteps.
class ReplayStats {
  public:
    static constexpr double kMaxSteps = 256.0;
    // A replayed step of (N, G) that emitted `tokens` and verified `candidates` (<= G).
    void record(int ngram_size, int verification_set_size, int tokens, int candidates,
                double weight);
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

}  // namespace pylookahead
