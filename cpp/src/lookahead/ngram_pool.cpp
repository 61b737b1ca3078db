#include "lookahead/ngram_pool.h"

#include <algorithm>

#include "check.h"

namespace pylookahead {

NgramPool::NgramPool(int ngram_len, int capacity) : ngram_len_(ngram_len), capacity_(capacity) {
    PYLA_CHECK(ngram_len >= 1 && capacity >= 0,
               "ngram_len " << ngram_len << ", capacity " << capacity);
}

void NgramPool::insert(TokenId key, const TokenId* ngram, NgramSource source) {
    if (capacity_ == 0) return;
    List& list = lists_[key];
    const int len = ngram_len_;
    const int count = static_cast<int>(list.sources.size());
    int drop = -1;  // entry removed before appending: the duplicate, else the oldest if full
    for (int i = 0; i < count && drop < 0; ++i) {
        if (std::equal(ngram, ngram + len, list.tokens.begin() + i * len)) drop = i;
    }
    if (drop < 0 && count == capacity_) drop = 0;
    if (drop >= 0) {
        list.tokens.erase(list.tokens.begin() + drop * len, list.tokens.begin() + (drop + 1) * len);
        list.sources.erase(list.sources.begin() + drop);
    }
    list.tokens.insert(list.tokens.end(), ngram, ngram + len);
    list.sources.push_back(source);
}

NgramPool::Candidates NgramPool::find(TokenId key) const {
    auto it = lists_.find(key);
    if (it == lists_.end()) return {};
    return {it->second.tokens.data(), it->second.sources.data(),
            static_cast<int>(it->second.sources.size())};
}

int64_t NgramPool::size() const {
    int64_t n = 0;
    for (const auto& kv : lists_) n += static_cast<int64_t>(kv.second.sources.size());
    return n;
}

}  // namespace pylookahead
