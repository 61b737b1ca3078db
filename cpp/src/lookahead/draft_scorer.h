// Scores of draft tokens for the token tree, std-only: the empirical chance that a proposed token
// is accepted given that its parent was, per (source, depth, rank, grade), learned from the
// verdicts of this run. A grade is a class of the evidence behind a proposal (match_grade: how
// many tokens of the text's suffix an earlier occurrence matched, for suffix lookup and the pool's
// seeded n-grams), so that the rates tell a strong proposal from a weak one of the same rank and
// the step-cost cut (LookaheadAlgorithm) spends rows only where they pay.
// A node's score is the product of those rates along its path, i.e. an estimate of the
// chance that it is accepted; the tree keeps the R nodes of highest score, which maximizes the
// expected number of accepted tokens under that estimate. Scores decide only which tokens are
// verified, never the output.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "lookahead/token_tree.h"

namespace pylookahead {

class DraftScorer {
  public:
    static constexpr int kDepths = 16;  // depths >= kDepths share the last bucket
    static constexpr int kRanks = 8;    // ranks >= kRanks share the last bucket
    static constexpr int kGrades = 7;   // grades 0 .. kGrades - 1 (0: the source has none)

    // The grade of a proposal that continues an earlier occurrence of the text's last `length`
    // >= 1 tokens (x included): 0 for x alone, then 2, 3, 4-5, 6-9, 10-17, 18+ tokens (classes
    // doubling in width). A longer match is right more often (benchmarks/match_rates.py).
    static int match_grade(int length);

    DraftScorer();
    // P(accepted | parent accepted) for a token of `source` at `depth` (>= 1), `rank` (>= 0) and
    // `grade` (clamped to [0, kGrades)): (accepted + prior * w0) / (offered + w0), prior from the
    // source, rank and grade.
    double rate(DraftSource source, int depth, int rank, int grade = 0) const;
    // Learns from one verified tree: every node whose parent was accepted (or is the root) was
    // offered; accepted [nodes.size()] says which were accepted. Counts are halved when a
    // bucket's offers reach kMaxOffered, so the rates follow the text.
    void record(const std::vector<TreeNode>& nodes, const std::vector<uint8_t>& accepted);
    // Offers recorded for a bucket (tests, statistics).
    double offered(DraftSource source, int depth, int rank, int grade = 0) const {
        return at(source, depth, rank, grade).offered;
    }

    static constexpr double kPriorWeight = 2.0;
    static constexpr double kMaxOffered = 256.0;

  private:
    struct Bucket {
        double offered = 0.0, accepted = 0.0;
    };
    static int index(DraftSource source, int depth, int rank, int grade);
    const Bucket& at(DraftSource source, int depth, int rank, int grade) const {
        return buckets_[index(source, depth, rank, grade)];
    }
    std::vector<Bucket> buckets_;  // [kNumDraftSources * kDepths * kRanks * kGrades]
};

}  // namespace pylookahead
