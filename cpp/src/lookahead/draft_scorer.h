// Scores of draft tokens for the token tree, std-only: the empirical chance that a proposed token
// is accepted given that its parent was, per (source, depth, rank), learned from the verdicts of
// this run. A node's score is the product of those rates along its path, i.e. an estimate of the
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

    DraftScorer();
    // P(accepted | parent accepted) for a token of `source` at `depth` (>= 1) and `rank` (>= 0):
    // (accepted + prior * w0) / (offered + w0), prior from the source and rank.
    double rate(DraftSource source, int depth, int rank) const;
    // Learns from one verified tree: every node whose parent was accepted (or is the root) was
    // offered; accepted [nodes.size()] says which were accepted. Counts are halved when a
    // bucket's offers reach kMaxOffered, so the rates follow the text.
    void record(const std::vector<TreeNode>& nodes, const std::vector<uint8_t>& accepted);
    // Offers and acceptances recorded for a bucket (tests, statistics).
    double offered(DraftSource source, int depth, int rank) const {
        return at(source, depth, rank).offered;
    }

    static constexpr double kPriorWeight = 2.0;
    static constexpr double kMaxOffered = 256.0;

  private:
    struct Bucket {
        double offered = 0.0, accepted = 0.0;
    };
    static int index(DraftSource source, int depth, int rank);
    const Bucket& at(DraftSource source, int depth, int rank) const {
        return buckets_[index(source, depth, rank)];
    }
    std::vector<Bucket> buckets_;  // [kNumDraftSources * kDepths * kRanks]
};

}  // namespace pylookahead
