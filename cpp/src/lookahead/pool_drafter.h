// The n-gram pool as a draft source of the token tree (std-only): the pool's best G entries for
// x (NgramPool::select: most matching context, then newest), each an (N-1)-token path, scored
// as history (seeded) or window (harvested) proposals with their rank in that order; a history
// entry is graded by its match (DraftScorer::match_grade of x and the context tokens that equal
// the text's), a window entry (no context) has grade 0. The pool is
// written by LookaheadAlgorithm (Jacobi window harvest, seeding); this only reads it.
#pragma once

#include <memory>
#include <vector>

#include "lookahead/draft_source.h"
#include "lookahead/shared_pool.h"

namespace pylookahead {

// The draft source of a pool entry.
inline DraftSource draft_source_of(NgramSource source) {
    return source == NgramSource::kWindow ? DraftSource::kWindow : DraftSource::kHistory;
}

class PoolDrafter : public Drafter {
  public:
    // `pool` must outlive this; G = candidates per lookup (>= 1).
    PoolDrafter(SharedPool* pool, int verification_set_size);
    // Locks the pool while it reads.
    void propose(const DraftContext& ctx, TokenTree* tree) override;

  private:
    SharedPool* pool_;
    int g_;
    std::vector<int> order_;
};

}  // namespace pylookahead
