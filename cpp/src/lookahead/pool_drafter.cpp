#include "lookahead/pool_drafter.h"

namespace pylookahead {

PoolDrafter::PoolDrafter(SharedPool* pool, int verification_set_size)
    : pool_(pool), g_(verification_set_size) {}

void PoolDrafter::propose(const DraftContext& ctx, TokenTree* tree) {
    pool_->read([&](const NgramPool& pool) {
        const NgramPool::Candidates c = pool.select(ctx.x, ctx.recent, g_, &order_);
        const int len = pool.ngram_len();
        for (size_t r = 0; r < order_.size(); ++r) {
            const int i = order_[r];
            add_scored_path(tree, *ctx.scorer, c.tokens + static_cast<size_t>(i) * len, len,
                            draft_source_of(c.sources[i]), static_cast<int>(r));
        }
    });
}

}  // namespace pylookahead
