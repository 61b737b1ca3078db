// The n-gram pool of lookahead decoding: key token -> the most recent <= G (N-1)-grams that
// followed it. Candidates for verification are read from here; the Jacobi window and the
// prompt/accepted text write to it.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
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

    // The same pool for another (N - 1, G): every entry's first ngram_len tokens (entries shorter
    // than that are dropped), each key keeping its `capacity` most recent. Order is kept.
    NgramPool reshaped(int ngram_len, int capacity) const;

    // Binary form (little-endian int32/uint32, see docs/session.md): ngram_len, capacity, keys,
    // then per key its id, count and entries (source byte + tokens), oldest first.
    void write(std::ostream& out) const;
    // Reads what write() wrote. `name` names the source in errors. Throws ConfigError naming the
    // field when the data is truncated or out of range (ids must be in [0, vocab_size)).
    static NgramPool read(std::istream& in, const std::string& name, int vocab_size);

  private:
    friend bool operator==(const NgramPool& a, const NgramPool& b);
    struct List {
        std::vector<TokenId> tokens;       // [count * ngram_len]
        std::vector<NgramSource> sources;  // [count]
    };
    int ngram_len_;
    int capacity_;
    std::unordered_map<TokenId, List> lists_;
};

// Same shape and the same lists (order included).
bool operator==(const NgramPool& a, const NgramPool& b);

// A pool that outlives one generation: a Session keeps one across calls (GenerationConfig::
// keep_pool), and Sessions may share one (Session::share_pool), hence the mutex. Lock `mutex`
// around every access to `pool`.
struct SharedPool {
    std::mutex mutex;
    NgramPool pool{1, 0};  // reshaped to each lookahead config that uses it
};

}  // namespace pylookahead
