// Token recycling's table (Luo et al. 2024), std-only: for every token, the k best next tokens
// the model predicted at the last row that held it. SharedPool owns one, so it lives as long as
// the n-gram pool: across the lookahead runs of one generation, and across generations that keep
// the pool (GenerationConfig::keep_pool). Not thread-safe (SharedPool locks it).
//
// Memory: k int32 per token id up to the largest one seen, at most vocab x k x 4 bytes (4.8 MB
// for Qwen2.5's 151,665 ids at k = 8). Cost: update O(rows x k), find O(1), tokens_known O(ids).
#pragma once

#include <cstdint>
#include <vector>

#include "pylookahead/types.h"

namespace pylookahead {

class SuccessorTable {
  public:
    int k() const { return k_; }
    // Empties the table; from now on each token holds k >= 0 successors.
    void reset(int k);
    // tokens [rows], successors [rows * k] (best first): each row's token gets its row's
    // successors; a later row of the same token wins. Tokens < 0 are skipped.
    void update(const TokenId* tokens, const TokenId* successors, int rows);
    // The k successors of `token`, best first (-1 where fewer are known), or null when none.
    const TokenId* find(TokenId token) const;
    int64_t tokens_known() const;  // tokens whose successors are known (statistics, tests)

  private:
    int k_ = 0;
    std::vector<TokenId> table_;  // [ids * k], -1 = unknown
};

}  // namespace pylookahead
