#include "lookahead/successor_table.h"

#include <algorithm>

#include "check.h"

namespace pylookahead {

void SuccessorTable::reset(int k) {
    PYLA_CHECK(k >= 0, "successor table k " << k);
    k_ = k;
    table_.clear();
}

void SuccessorTable::update(const TokenId* tokens, const TokenId* successors, int rows) {
    if (k_ == 0) return;
    for (int i = 0; i < rows; ++i) {
        const TokenId t = tokens[i];
        if (t < 0) continue;
        const size_t at = static_cast<size_t>(t) * k_;
        if (at + k_ > table_.size()) table_.resize(at + k_, -1);
        std::copy_n(successors + static_cast<size_t>(i) * k_, k_, table_.begin() + at);
    }
}

int64_t SuccessorTable::tokens_known() const {
    if (k_ == 0) return 0;
    int64_t n = 0;
    for (size_t at = 0; at < table_.size(); at += k_) n += table_[at] >= 0;
    return n;
}

const TokenId* SuccessorTable::find(TokenId token) const {
    if (token < 0 || k_ == 0) return nullptr;
    const size_t at = static_cast<size_t>(token) * k_;
    if (at >= table_.size() || table_[at] < 0) return nullptr;
    return table_.data() + at;
}

}  // namespace pylookahead
