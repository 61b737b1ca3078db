#include "lookahead/draft_scorer.h"

#include <algorithm>

namespace pylookahead {

namespace {

// Before any verdict: a history or suffix continuation is often right, a window n-gram or a
// recycled successor less so, and lower-ranked proposals less than the first. A history or suffix
// continuation is the likelier right the longer its match (match_grade; grade 0 matched x alone),
// and past its first token, once that was right, likelier still.
double prior(DraftSource source, int depth, int rank, int grade) {
    double base = 0.3;
    switch (source) {
        case DraftSource::kHistory:
        case DraftSource::kSuffix:
            base = depth == 1 ? 0.3 + 0.1 * grade : 0.6 + 0.05 * grade;
            break;
        case DraftSource::kWindow: base = 0.3; break;
        case DraftSource::kRecycle: base = 0.4; break;
    }
    return base / (1.0 + rank);
}

}  // namespace

int DraftScorer::match_grade(int length) {
    // The longest match of each grade but the last.
    static constexpr int kLongest[] = {1, 2, 3, 5, 9, 17};
    static_assert(sizeof(kLongest) / sizeof(kLongest[0]) == kGrades - 1);
    int grade = 0;
    for (int longest : kLongest) grade += length > longest;
    return grade;
}

DraftScorer::DraftScorer() : buckets_(kNumDraftSources * kDepths * kRanks * kGrades) {}

int DraftScorer::index(DraftSource source, int depth, int rank, int grade) {
    const int d = std::min(std::max(depth, 1), kDepths) - 1;
    const int r = std::min(std::max(rank, 0), kRanks - 1);
    const int g = std::min(std::max(grade, 0), kGrades - 1);
    return ((static_cast<int>(source) * kDepths + d) * kRanks + r) * kGrades + g;
}

double DraftScorer::rate(DraftSource source, int depth, int rank, int grade) const {
    const Bucket& b = at(source, depth, rank, grade);
    const int r = std::min(std::max(rank, 0), kRanks - 1);
    const int g = std::min(std::max(grade, 0), kGrades - 1);
    return (b.accepted + prior(source, depth, r, g) * kPriorWeight) / (b.offered + kPriorWeight);
}

void DraftScorer::record(const std::vector<TreeNode>& nodes, const std::vector<uint8_t>& accepted) {
    for (size_t i = 0; i < nodes.size(); ++i) {
        const TreeNode& v = nodes[i];
        if (v.parent >= 0 && !accepted[v.parent]) continue;
        Bucket& b = buckets_[index(v.source, v.depth, v.rank, v.grade)];
        b.offered += 1.0;
        b.accepted += accepted[i] ? 1.0 : 0.0;
        if (b.offered >= kMaxOffered) {
            b.offered *= 0.5;
            b.accepted *= 0.5;
        }
    }
}

}  // namespace pylookahead
