#include "lookahead/draft_source.h"

namespace pylookahead {

int add_scored_path(TokenTree* tree, const DraftScorer& scorer, const TokenId* path, int n,
                    DraftSource source, int rank, double min_score) {
    int parent = TokenTree::kRoot;
    double score = 1.0;
    for (int d = 0; d < n; ++d) {
        score *= scorer.rate(source, d + 1, rank);
        if (score < min_score) return d;
        parent = tree->add(parent, path[d], score, source, rank);
    }
    return n;
}

}  // namespace pylookahead
