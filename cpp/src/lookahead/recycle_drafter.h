// Token recycling, a draft source (std-only; Luo et al. 2024): for every token, the k best next
// tokens the model predicted at the last row that held it, kept in a table that every step
// updates from the logits it computed anyway (StepModel::set_successors). A lookup grows a tree
// from x best-first: the highest-scoring frontier token is added, then its own successors
// become frontier tokens (score = parent score * DraftScorer rate at (depth, rank)), until the
// budget is spent.
//
// Memory: k int32 per token id seen (the table grows to the largest id). Cost per lookup:
// O(budget * k * log(budget * k)); per step O(rows * k).
#pragma once

#include <cstdint>
#include <vector>

#include "lookahead/draft_source.h"

namespace pylookahead {

class RecycleDrafter : public Drafter {
  public:
    explicit RecycleDrafter(int top_k);
    int top_k() const { return k_; }

    void propose(const DraftContext& ctx, TokenTree* tree) override;
    // rows.k must equal top_k(); rows with fewer successors are ignored.
    void on_step(const StepRows& rows) override;

  private:
    const TokenId* row(TokenId token) const;
    int k_;
    std::vector<TokenId> table_;  // [ids * k], -1 = no successor known
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
