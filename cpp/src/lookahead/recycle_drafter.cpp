#include "lookahead/recycle_drafter.h"

#include <algorithm>

#include "check.h"

namespace pylookahead {

RecycleDrafter::RecycleDrafter(int top_k) : k_(top_k) {
    PYLA_CHECK(top_k >= 1, "recycle top_k " << top_k);
}

const TokenId* RecycleDrafter::row(TokenId token) const {
    const size_t at = static_cast<size_t>(token) * k_;
    if (token < 0 || at >= table_.size() || table_[at] < 0) return nullptr;
    return table_.data() + at;
}

void RecycleDrafter::on_step(const StepRows& rows) {
    if (rows.k != k_) return;
    for (int i = 0; i < rows.rows; ++i) {
        const TokenId t = rows.tokens[i];
        if (t < 0) continue;
        const size_t at = static_cast<size_t>(t) * k_;
        if (at + k_ > table_.size()) table_.resize(at + k_, -1);
        std::copy_n(rows.successors + static_cast<size_t>(i) * k_, k_, table_.begin() + at);
    }
}

void RecycleDrafter::propose(const DraftContext& ctx, TokenTree* tree) {
    const DraftScorer& scorer = *ctx.scorer;
    heap_.clear();
    auto push_children = [&](TokenId token, int parent, int depth, double score) {
        const TokenId* r = row(token);
        if (r == nullptr) return;
        for (int j = 0; j < k_ && r[j] >= 0; ++j) {
            heap_.push_back(
                {score * scorer.rate(DraftSource::kRecycle, depth, j), parent, depth, j, r[j]});
            std::push_heap(heap_.begin(), heap_.end());
        }
    };
    push_children(ctx.x, TokenTree::kRoot, 1, 1.0);
    for (int added = 0; added < ctx.budget && !heap_.empty(); ++added) {
        std::pop_heap(heap_.begin(), heap_.end());
        const Frontier f = heap_.back();
        heap_.pop_back();
        const int node = tree->add(f.parent, f.token, f.score, DraftSource::kRecycle, f.rank);
        push_children(f.token, node, f.depth + 1, f.score);
    }
}

}  // namespace pylookahead
