// The 2-D Jacobi window of lookahead decoding: N-1 levels of W guesses each, where level 0 is
// one shorter because its column 0 is the input token x. Every step re-runs the whole window;
// the last level's argmax gives W new guesses, which become the new last level after the window
// slides one column (spec section 2).
#pragma once

#include <cstdint>
#include <vector>

#include "lookahead/ngram_pool.h"
#include "pylookahead/types.h"

namespace pylookahead {

class JacobiWindow {
  public:
    JacobiWindow(int window_size, int ngram_size);

    // Fills every level (level 0 columns 1..W-1, then levels 1..N-2) with tokens drawn uniformly,
    // with replacement, from `prompt` (non-empty) by a std::mt19937_64 seeded with `seed`. The
    // draw is plain index arithmetic on the generator's output, so it is the same everywhere.
    void init(const std::vector<TokenId>& prompt, uint64_t seed);

    // Cells in step-row order: cell (level, column) at index level * W + column. Index 0 is the
    // slot of x and holds no guess.
    const std::vector<TokenId>& cells() const { return cells_; }  // [(N - 1) * W]
    TokenId at(int level, int column) const { return cells_[level * window_size_ + column]; }

    // Harvests one n-gram per column j = 0..W-1 into `pool`: key = row-0 token of column j (x for
    // j = 0), value = (level 1..N-2 of column j, next[j]). Call before shift().
    // next [W]: argmax of the last level this step.
    void harvest(TokenId x, const TokenId* next, NgramPool* pool) const;

    // Slides by one column: level 0 <- level 1 [1:], level l <- level l+1, last level <- next.
    // For N = 2, level 0 <- next[1:].
    void shift(const TokenId* next);

  private:
    int window_size_;
    int ngram_size_;
    std::vector<TokenId> cells_;          // [(N - 1) * W]
    mutable std::vector<TokenId> ngram_;  // [N - 1] scratch of harvest()
};

}  // namespace pylookahead
