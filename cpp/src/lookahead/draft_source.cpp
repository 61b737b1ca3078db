#include "lookahead/draft_source.h"

namespace pylookahead {

void add_scored_path(TokenTree* tree, const DraftScorer& scorer, const TokenId* path, int n,
                     DraftSource source, int rank, int grade) {
    int parent = TokenTree::kRoot;
    double score = 1.0;
    for (int d = 0; d < n; ++d) {
        score *= scorer.rate(source, d + 1, rank, grade);
        parent = tree->add(parent, path[d], score, source, rank, grade);
    }
}

}  // namespace pylookahead
