// The draft tree of one step, std-only: candidate continuations of the input token x from any
// draft source, merged into a trie (a shared prefix is one node, one row), cut to a row budget
// by score, and verified against the step's argmax rows.
//
//   tree.clear(); tree.add(...) per proposed token   candidates, each with a score
//   tree.select(R, &nodes)                           at most R nodes, parents before children
//   verify_tree(t0, nodes, argmax)                   the accepted root path + the bonus token
//
// Verification is exact whatever the tree holds: node v is accepted iff its parent is (the
// root x always is) and v's token equals the argmax at its parent's row (t0 at the root).
// Children of one node carry distinct tokens, so at most one child of an accepted node can be
// accepted and the accepted nodes form one root path. Which tokens the tree holds changes only
// how long that path is, never the emitted tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "pylookahead/types.h"

namespace pylookahead {

// Where a draft token came from. GenerationStats::accepted_tokens_by_source is indexed by these
// values (names: draft_source_names()).
enum class DraftSource : uint8_t {
    kHistory = 0,  // an n-gram pool entry seeded from the prompt or the accepted text
    kWindow = 1,   // an n-gram pool entry harvested from the Jacobi window
    kSuffix = 2,   // the continuation of an earlier occurrence of the text's suffix
    kRecycle = 3,  // a successor the model predicted for this token in an earlier step
};
constexpr int kNumDraftSources = 4;
static_assert(kNumDraftSources ==
              sizeof(GenerationStats::accepted_tokens_by_source) / sizeof(int64_t));

// One node of a selected tree. Node indices are the order of the step rows after the window.
struct TreeNode {
    TokenId token = 0;
    int32_t parent = -1;                         // index of the parent node; -1 = the root (x)
    int32_t depth = 1;                           // 1 for a child of the root
    DraftSource source = DraftSource::kHistory;  // of the best-scoring proposal
    int32_t rank = 0;    // that proposal's rank among its source's proposals at the parent
    int32_t grade = 0;   // that proposal's evidence class (DraftScorer::kGrades; 0: none)
    double score = 0.0;  // estimated P(accepted) (TokenTree::add's best score)
};

// A trie of candidate tokens under the root, rebuilt every step. Not thread-safe.
class TokenTree {
  public:
    static constexpr int kRoot = -1;

    void clear();
    // The node for `token` under `parent` (kRoot or an index returned before), created if new.
    // Its score becomes the larger of its old and `score` (and then source, rank and grade those
    // of this proposal). Returns the node's index.
    int add(int parent, TokenId token, double score, DraftSource source, int rank, int grade = 0);
    int size() const { return static_cast<int>(nodes_.size()); }
    const TreeNode& node(int i) const { return nodes_[i].node; }
    double score(int i) const { return nodes_[i].score; }

    // At most `budget` nodes, taken best-first from the frontier (the root's children, then the
    // children of the nodes taken): highest score, then lowest depth, then first created. Each
    // node's parent comes before it (parent indices renumbered). Scores that never grow from
    // parent to child (products of rates <= 1) make this the `budget` best nodes.
    void select(int budget, std::vector<TreeNode>* out) const;

  private:
    struct Entry {
        TreeNode node;
        double score = 0.0;
        int32_t first_child = -1;
        int32_t next_sibling = -1;
    };
    std::vector<Entry> nodes_;
    int32_t root_first_child_ = -1;
    mutable std::vector<int32_t> order_, renumber_;  // select() scratch: heap, new indices
};

// What verification kept.
struct TreeVerdict {
    std::vector<int32_t> path;      // accepted node indices, root first (depth 1, 2, ...)
    std::vector<TokenId> emitted;   // [path + 1] the path's tokens, then the bonus token
    std::vector<uint8_t> accepted;  // [nodes] 1 for every accepted node (a trie: the path's)
};

// nodes [n] as select() returns them (parents before children); node_argmax [n] the argmax at
// each node's row; t0 the argmax at the root. The accepted path is the deepest accepted node's
// (ties to the lowest index: only nodes that are not a trie, e.g. the classic layout's separate
// chains, can tie). The bonus token is the argmax at its last node, or t0 for an empty path.
TreeVerdict verify_tree(TokenId t0, const std::vector<TreeNode>& nodes, const TokenId* node_argmax);

}  // namespace pylookahead
