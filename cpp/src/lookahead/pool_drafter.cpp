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
            const DraftSource source = draft_source_of(c.sources[i]);
            const int grade =
                source == DraftSource::kHistory
                    ? DraftScorer::match_grade(
                          1 + NgramPool::matched_context(c.contexts + i * NgramPool::kContextLen,
                                                         ctx.recent))
                    : 0;
            add_scored_path(tree, *ctx.scorer, c.tokens + static_cast<size_t>(i) * len, len, source,
                            static_cast<int>(r), grade);
        }
    });
}

}  // namespace pylookahead
