// The n-gram pool of lookahead decoding: key token -> the most recent <= G (N-1)-grams that
// followed it. Candidates for verification are read from here; the Jacobi window and the
// prompt/accepted text write to it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "pylookahead/types.h"

namespace pylookahead {

// Where an entry came from (its latest insert), for statistics only.
enum class NgramSource : uint8_t {
    kSeed,    // an n-gram of the prompt or of the accepted text (LookaheadConfig::seed_from_prompt)
    kWindow,  // harvested from a column of the Jacobi window
};

// Per key an ordered list of at most `capacity` distinct n-grams, oldest insert first.
// insert() of an n-gram already listed moves it to the end (refresh); a new one is appended,
// dropping the oldest when the list is full. Capacity 0 stores nothing. Looking up does not
// refresh. Memory: O(keys * capacity * ngram_len) int32, flat per key.
class NgramPool {
  public:
    // A key's list, valid until the next insert() or clear().
    struct Candidates {
        const TokenId* tokens = nullptr;       // [count * ngram_len] oldest first
        const NgramSource* sources = nullptr;  // [count]
        int count = 0;
    };

    // ngram_len = N - 1 (tokens after the key), capacity = G.
    NgramPool(int ngram_len, int capacity);

    // ngram [ngram_len]
    void insert(TokenId key, const TokenId* ngram, NgramSource source);
    Candidates find(TokenId key) const;
    void clear() { lists_.clear(); }

    int ngram_len() const { return ngram_len_; }
    int capacity() const { return capacity_; }
    int64_t size() const;  // n-grams over all keys

  private:
    struct List {
        std::vector<TokenId> tokens;       // [count * ngram_len]
        std::vector<NgramSource> sources;  // [count]
    };
    int ngram_len_;
    int capacity_;
    std::unordered_map<TokenId, List> lists_;
};

}  // namespace pylookahead
