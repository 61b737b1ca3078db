// Greedy verification of n-gram candidates against one step's argmax rows (spec section 3.3).
#pragma once

#include <vector>

#include "pylookahead/types.h"

namespace pylookahead {

struct VerifyResult {
    int candidate = -1;            // accepted candidate, -1 when none matched (m = 0)
    int num_accepted = 0;          // m: leading tokens of it that greedy decoding produces
    std::vector<TokenId> emitted;  // [m + 1] the m accepted tokens, then the bonus token
    std::vector<int> matched;      // [num_candidates] m_c of every candidate (statistics)
};

// t0 is the argmax at x. Candidate c matches its k-th token iff it equals t0 (k = 0) or the
// argmax at its own token k-1; m_c is its count of leading matches. The longest wins, ties to
// the earliest candidate. The bonus token is t0 if m = 0, else the argmax after the last accepted
// token. Unlike the reference code, the bonus is kept when all N-1 tokens match, so a step may
// emit N tokens (the paper's analysis; the repo's off-by-one caps it at N-1).
// candidates [num_candidates * len], candidate_argmax [num_candidates * len] (row-aligned).
VerifyResult verify_greedy(TokenId t0, const TokenId* candidates, const TokenId* candidate_argmax,
                           int num_candidates, int len);

}  // namespace pylookahead
