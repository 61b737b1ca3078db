#include "lookahead/verifier.h"

namespace pylookahead {

VerifyResult verify_greedy(TokenId t0, const TokenId* candidates, const TokenId* candidate_argmax,
                           int num_candidates, int len) {
    VerifyResult result;
    result.matched.resize(num_candidates > 0 ? num_candidates : 0);
    for (int c = 0; c < num_candidates; ++c) {
        const TokenId* cand = candidates + c * len;
        const TokenId* pred = candidate_argmax + c * len;
        int m = 0;
        while (m < len && cand[m] == (m == 0 ? t0 : pred[m - 1])) ++m;
        result.matched[c] = m;
        if (m > result.num_accepted) {
            result.num_accepted = m;
            result.candidate = c;
        }
    }
    const int m = result.num_accepted;
    if (m > 0) {
        const TokenId* cand = candidates + result.candidate * len;
        result.emitted.assign(cand, cand + m);
        result.emitted.push_back(candidate_argmax[result.candidate * len + m - 1]);
    } else {
        result.emitted.push_back(t0);
    }
    return result;
}

}  // namespace pylookahead
