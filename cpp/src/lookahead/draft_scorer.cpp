#include "lookahead/draft_scorer.h"

#include <algorithm>

namespace pylookahead {

namespace {

// Before any verdict: a history or suffix continuation is often right, a window n-gram or a
// recycled successor less so, and lower-ranked proposals less than the first.
double prior(DraftSource source, int rank) {
    double base = 0.3;
    switch (source) {
        case DraftSource::kHistory: base = 0.5; break;
        case DraftSource::kWindow: base = 0.3; break;
        case DraftSource::kSuffix: base = 0.6; break;
        case DraftSource::kRecycle: base = 0.4; break;
    }
    return base / (1.0 + rank);
}

}  // namespace

DraftScorer::DraftScorer() : buckets_(kNumDraftSources * kDepths * kRanks) {}

int DraftScorer::index(DraftSource source, int depth, int rank) {
    const int d = std::min(std::max(depth, 1), kDepths) - 1;
    const int r = std::min(std::max(rank, 0), kRanks - 1);
    return (static_cast<int>(source) * kDepths + d) * kRanks + r;
}

double DraftScorer::rate(DraftSource source, int depth, int rank) const {
    const Bucket& b = at(source, depth, rank);
    const double r = std::min(std::max(rank, 0), kRanks - 1);
    return (b.accepted + prior(source, static_cast<int>(r)) * kPriorWeight) /
           (b.offered + kPriorWeight);
}

void DraftScorer::record(const std::vector<TreeNode>& nodes, const std::vector<uint8_t>& accepted) {
    for (size_t i = 0; i < nodes.size(); ++i) {
        const TreeNode& v = nodes[i];
        if (v.parent >= 0 && !accepted[v.parent]) continue;
        Bucket& b = buckets_[index(v.source, v.depth, v.rank)];
        b.offered += 1.0;
        b.accepted += accepted[i] ? 1.0 : 0.0;
        if (b.offered >= kMaxOffered) {
            b.offered *= 0.5;
            b.accepted *= 0.5;
        }
    }
}

}  // namespace pylookahead
