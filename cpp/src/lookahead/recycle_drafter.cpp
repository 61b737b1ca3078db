#include "lookahead/recycle_drafter.h"

#include <algorithm>

#include "check.h"

namespace pylookahead {

RecycleDrafter::RecycleDrafter(SharedPool* pool, int top_k) : pool_(pool), k_(top_k) {
    PYLA_CHECK(pool != nullptr && top_k >= 1, "recycle top_k " << top_k);
}

void RecycleDrafter::start() { pool_->start_successors(k_); }

void RecycleDrafter::on_step(const StepRows& rows) {
    if (rows.k != k_) return;
    pool_->with_successors([&](SuccessorTable& table) {
        if (table.k() == k_) table.update(rows.tokens, rows.successors, rows.rows);
    });
}

void RecycleDrafter::propose(const DraftContext& ctx, TokenTree* tree) {
    const DraftScorer& scorer = *ctx.scorer;
    heap_.clear();
    pool_->with_successors([&](const SuccessorTable& table) {
        if (table.k() != k_) return;
        auto push_children = [&](TokenId token, int parent, int depth, double score) {
            const TokenId* r = table.find(token);
            if (r == nullptr) return;
            for (int j = 0; j < k_ && r[j] >= 0; ++j) {
                heap_.push_back(
                    {score * scorer.rate(DraftSource::kRecycle, depth, j), parent, depth, j, r[j]});
                std::push_heap(heap_.begin(), heap_.end());
            }
        };
        push_children(ctx.x, TokenTree::kRoot, 1, 1.0);
        // Every node the other sources proposed (before this one) gets its token's successors
        // as candidates too, in the same frontier: past a draft's last token they continue it (a
        // suffix or pool draft ends where its match ends), at an inner node they stand beside
        // the draft's own next token.
        const int proposed = tree->size();
        for (int i = 0; i < proposed; ++i) {
            const TreeNode& n = tree->node(i);
            push_children(n.token, i, n.depth + 1, tree->score(i));
        }
        for (int added = 0; added < ctx.budget && !heap_.empty(); ++added) {
            std::pop_heap(heap_.begin(), heap_.end());
            const Frontier f = heap_.back();
            heap_.pop_back();
            const int before = tree->size();
            const int node = tree->add(f.parent, f.token, f.score, DraftSource::kRecycle, f.rank);
            // A node already in the tree had its successors pushed when it was added.
            if (node >= before) push_children(f.token, node, f.depth + 1, f.score);
        }
    });
}

}  // namespace pylookahead
