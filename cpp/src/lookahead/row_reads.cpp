#include "lookahead/row_reads.h"

#include "check.h"

namespace pylookahead {

void first_pass_rows(const std::vector<int32_t>& out_parent, std::vector<int32_t>* rows) {
    rows->clear();
    for (size_t i = 0; i < out_parent.size(); ++i) {
        PYLA_CHECK(out_parent[i] < static_cast<int32_t>(i),
                   "out row " << i << " has parent row " << out_parent[i]);
        if (out_parent[i] < 0) rows->push_back(static_cast<int32_t>(i));
    }
}

void second_pass_rows(const std::vector<int32_t>& out_parent, const std::vector<TokenId>& row_token,
                      const std::vector<TokenId>& choice, std::vector<int32_t>* rows) {
    const size_t n = out_parent.size();
    PYLA_CHECK(row_token.size() == n && choice.size() == n,
               "second_pass_rows: " << n << " rows, " << row_token.size() << " tokens, "
                                    << choice.size() << " choices");
    rows->clear();
    std::vector<uint8_t> taken(n, 0);
    for (size_t i = 0; i < n; ++i) {
        const int32_t p = out_parent[i];
        if (p < 0) continue;
        PYLA_CHECK(p < static_cast<int32_t>(i), "out row " << i << " has parent row " << p);
        const bool matched = out_parent[p] < 0 && choice[p] == row_token[i];
        taken[i] = taken[p] || matched;
        if (taken[i]) rows->push_back(static_cast<int32_t>(i));
    }
}

}  // namespace pylookahead
