// Token recycling, a draft source (std-only; Luo et al. 2024): for every token, the k best next
// tokens the model predicted at the last row that held it, kept in the SharedPool's
// SuccessorTable, which every step updates from the logits it computed anyway
// (StepModel::set_successors); the table lives as long as the pool's n-grams (fresh per
// generation, or kept across generations with GenerationConfig::keep_pool). A lookup grows the
// tree best-first from x and from every node already in it (the other sources' proposals, which
// propose first): the highest-scoring frontier token is added, then its own successors become
// frontier tokens (score = parent score * DraftScorer rate at (depth, rank)), until `budget`
// tokens are added.
//
// Cost per lookup: O((nodes + budget) * k * log((nodes + budget) * k)) under the pool's lock, nodes
// the tree's size before it; per step O(rows * k).
#pragma once

#include <cstdint>
#include <vector>

#include "lookahead/draft_source.h"
#include "lookahead/shared_pool.h"

namespace pylookahead {

class RecycleDrafter : public Drafter {
  public:
    // pool: not owned, outlives the drafter.
    RecycleDrafter(SharedPool* pool, int top_k);
    int top_k() const { return k_; }

    // Readies the pool's table for this drafter's k (kept if the pool kept one of that k).
    void start();
    void propose(const DraftContext& ctx, TokenTree* tree) override;
    // rows.k must equal top_k(); rows with fewer successors are ignored.
    void on_step(const StepRows& rows) override;

  private:
    SharedPool* pool_;
    int k_;
    struct Frontier {
        double score;
        int32_t parent;  // tree node, or TokenTree::kRoot
        int32_t depth;
        int32_t rank;
        TokenId token;
        bool operator<(const Frontier& o) const { return score < o.score; }
    };
    std::vector<Frontier> heap_;  // propose() scratch
};

}  // namespace pylookahead
