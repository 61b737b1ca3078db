#include "lookahead/auto/replay_stats.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "check.h"
#include "pylookahead/errors.h"

namespace pylookahead {

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

}  // namespace pylookahead
