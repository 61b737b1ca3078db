#include "lookahead/ngram_pool.h"

#include <algorithm>
#include <istream>
#include <ostream>
#include <string>
#include <utility>

#include "io/binary_io.h"
#include "pylookahead/errors.h"

#include "check.h"

namespace pylookahead {

NgramPool::NgramPool(int ngram_len, int capacity) : ngram_len_(ngram_len), capacity_(capacity) {
    PYLA_CHECK(ngram_len >= 1 && capacity >= 0,
               "ngram_len " << ngram_len << ", capacity " << capacity);
}

void NgramPool::insert(TokenId key, const TokenId* ngram, NgramSource source,
                       const TokenId* context) {
    if (capacity_ == 0) return;
    List& list = lists_[key];
    const int len = ngram_len_;
    const int count = static_cast<int>(list.sources.size());
    int duplicate = -1;
    for (int i = 0; i < count && duplicate < 0; ++i) {
        if (std::equal(ngram, ngram + len, list.tokens.begin() + i * len)) duplicate = i;
    }
    TokenId kept[kContextLen];
    std::fill_n(kept, kContextLen, kUnknown);
    if (context != nullptr) {
        std::copy_n(context, kContextLen, kept);
    } else if (duplicate >= 0) {
        std::copy_n(list.contexts.begin() + duplicate * kContextLen, kContextLen, kept);
    }
    // Entry removed before appending: the duplicate, else the oldest if full.
    const int drop = duplicate >= 0 ? duplicate : (count == capacity_ ? 0 : -1);
    if (drop >= 0) {
        list.tokens.erase(list.tokens.begin() + drop * len, list.tokens.begin() + (drop + 1) * len);
        list.sources.erase(list.sources.begin() + drop);
        list.contexts.erase(list.contexts.begin() + drop * kContextLen,
                            list.contexts.begin() + (drop + 1) * kContextLen);
    }
    list.tokens.insert(list.tokens.end(), ngram, ngram + len);
    list.sources.push_back(source);
    list.contexts.insert(list.contexts.end(), kept, kept + kContextLen);
}

NgramPool::Candidates NgramPool::find(TokenId key) const {
    auto it = lists_.find(key);
    if (it == lists_.end()) return {};
    return {it->second.tokens.data(), it->second.sources.data(), it->second.contexts.data(),
            static_cast<int>(it->second.sources.size())};
}

NgramPool::Candidates NgramPool::select(TokenId key, const TokenId* recent, int max_count,
                                        std::vector<int>* order) const {
    order->clear();
    const Candidates c = find(key);
    if (c.count == 0 || max_count <= 0) return c;
    // Rank = matched context tokens * (capacity + 1) + index: more context first, then newer.
    std::vector<std::pair<int, int>> ranked;
    ranked.reserve(c.count);
    for (int i = 0; i < c.count; ++i) {
        const int m = matched_context(c.contexts + i * kContextLen, recent);
        ranked.emplace_back(m * (c.count + 1) + i, i);
    }
    const int n = std::min(max_count, c.count);
    std::partial_sort(ranked.begin(), ranked.begin() + n, ranked.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int k = 0; k < n; ++k) order->push_back(ranked[k].second);
    return c;
}

int64_t NgramPool::size() const {
    int64_t n = 0;
    for (const auto& kv : lists_) n += static_cast<int64_t>(kv.second.sources.size());
    return n;
}

NgramPool NgramPool::reshaped(int ngram_len, int capacity) const {
    NgramPool out(ngram_len, capacity);
    if (ngram_len > ngram_len_) return out;
    for (const auto& [key, list] : lists_) {
        const int count = static_cast<int>(list.sources.size());
        for (int i = 0; i < count; ++i) {
            out.insert(key, list.tokens.data() + static_cast<size_t>(i) * ngram_len_,
                       list.sources[i],
                       list.contexts.data() + static_cast<size_t>(i) * kContextLen);
        }
    }
    return out;
}

bool operator==(const NgramPool& a, const NgramPool& b) {
    if (a.ngram_len_ != b.ngram_len_ || a.capacity_ != b.capacity_) return false;
    if (a.lists_.size() != b.lists_.size()) return false;
    for (const auto& [key, list] : a.lists_) {
        auto it = b.lists_.find(key);
        if (it == b.lists_.end() || it->second.tokens != list.tokens ||
            it->second.sources != list.sources || it->second.contexts != list.contexts) {
            return false;
        }
    }
    return true;
}

namespace {

uint32_t get_u32(std::istream& in, const std::string& name, const char* field) {
    uint32_t v = 0;
    if (!read_u32_le(in, &v))
        throw ConfigError(name + ": truncated pool data while reading " + field);
    return v;
}

// Reads a uint32 that must lie in [lo, hi].
int64_t get_in_range(std::istream& in, const std::string& name, const char* field, int64_t lo,
                     int64_t hi) {
    const int64_t v = get_u32(in, name, field);
    if (v < lo || v > hi) {
        throw ConfigError(name + ": pool " + field + " must be in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "] (got " + std::to_string(v) + ")");
    }
    return v;
}

}  // namespace

void NgramPool::write(std::ostream& out) const {
    std::vector<TokenId> keys;
    keys.reserve(lists_.size());
    for (const auto& kv : lists_) {
        if (!kv.second.sources.empty()) keys.push_back(kv.first);
    }
    std::sort(keys.begin(), keys.end());
    write_u32_le(out, static_cast<uint32_t>(ngram_len_));
    write_u32_le(out, static_cast<uint32_t>(capacity_));
    write_u32_le(out, static_cast<uint32_t>(keys.size()));
    for (TokenId key : keys) {
        const List& list = lists_.at(key);
        write_u32_le(out, static_cast<uint32_t>(key));
        write_u32_le(out, static_cast<uint32_t>(list.sources.size()));
        for (size_t i = 0; i < list.sources.size(); ++i) {
            const char source = static_cast<char>(list.sources[i]);
            out.write(&source, 1);
            for (int j = 0; j < ngram_len_; ++j) {
                write_u32_le(out, static_cast<uint32_t>(list.tokens[i * ngram_len_ + j]));
            }
            for (int j = 0; j < kContextLen; ++j) {  // kUnknown is written as 0xFFFFFFFF
                write_u32_le(out, static_cast<uint32_t>(list.contexts[i * kContextLen + j]));
            }
        }
    }
}

NgramPool NgramPool::read(std::istream& in, const std::string& name, int vocab_size,
                          bool with_contexts) {
    const int ngram_len = static_cast<int>(get_in_range(in, name, "ngram_len", 1, 63));
    const int capacity = static_cast<int>(get_in_range(in, name, "capacity", 0, 64));
    NgramPool pool(ngram_len, capacity);
    const int64_t keys = get_in_range(in, name, "key count", 0, vocab_size);
    const int64_t max_id = static_cast<int64_t>(vocab_size) - 1;
    std::vector<TokenId> ngram(ngram_len);
    TokenId context[kContextLen];
    TokenId previous = -1;
    for (int64_t k = 0; k < keys; ++k) {
        const TokenId key = static_cast<TokenId>(get_in_range(in, name, "key", 0, max_id));
        if (key <= previous) {
            throw ConfigError(name + ": pool keys must be ascending and distinct (got " +
                              std::to_string(key) + " after " + std::to_string(previous) + ")");
        }
        previous = key;
        const int64_t count = get_in_range(in, name, "entry count", 1, capacity);
        for (int64_t i = 0; i < count; ++i) {
            char source = 0;
            if (!in.read(&source, 1))
                throw ConfigError(name + ": truncated pool data while reading source");
            if (source != static_cast<char>(NgramSource::kSeed) &&
                source != static_cast<char>(NgramSource::kWindow)) {
                throw ConfigError(name + ": pool entry source must be 0 or 1 (got " +
                                  std::to_string(static_cast<int>(source)) + ")");
            }
            for (int j = 0; j < ngram_len; ++j) {
                ngram[j] = static_cast<TokenId>(get_in_range(in, name, "token", 0, max_id));
            }
            std::fill_n(context, kContextLen, kUnknown);
            for (int j = 0; with_contexts && j < kContextLen; ++j) {
                const uint32_t v = get_u32(in, name, "context token");
                if (v == static_cast<uint32_t>(kUnknown)) continue;
                if (v > static_cast<uint32_t>(max_id)) {
                    throw ConfigError(name + ": pool context token must be in [0, " +
                                      std::to_string(max_id) + "] or 4294967295 (unknown) (got " +
                                      std::to_string(v) + ")");
                }
                context[j] = static_cast<TokenId>(v);
            }
            pool.insert(key, ngram.data(), static_cast<NgramSource>(source), context);
        }
    }
    return pool;
}

}  // namespace pylookahead
