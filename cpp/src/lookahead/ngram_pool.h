// The n-gram pool of lookahead decoding: key token -> the most recent (N-1)-grams that followed
// it, each with the few tokens that preceded the key where it was seen. Candidates for
// verification are read from here (select(): the G whose context best matches the text now);
// the Jacobi window and the prompt/accepted text write to it.
#pragma once

#include <cstdint>
#include <iosfwd>
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
// refresh. Memory: O(keys * capacity * (ngram_len + kContextLen)) int32, flat per key.
//
// Each entry also keeps its context: the kContextLen tokens before the key where the n-gram was
// seen (oldest first; kUnknown where not known, e.g. for n-grams of the Jacobi window). select()
// ranks a key's entries by how many trailing context tokens equal the tokens before the key now,
// then by recency, as prompt-lookup decoding prefers the longest suffix match. Which candidates are
// verified never changes the output, only how many tokens a step accepts.
class NgramPool {
  public:
    static constexpr int kContextLen = 3;
    static constexpr TokenId kUnknown = -1;
    // Entries a lookahead run keeps per key: select() picks its G candidates among them
    // (none when G = 0: plain Jacobi decoding keeps no pool).
    static int kept_per_key(int verification_set_size) {
        if (verification_set_size == 0) return 0;
        return verification_set_size > 16 ? verification_set_size : 16;
    }

    // A key's list, valid until the next insert() or clear().
    struct Candidates {
        const TokenId* tokens = nullptr;       // [count * ngram_len] oldest first
        const NgramSource* sources = nullptr;  // [count]
        const TokenId* contexts = nullptr;     // [count * kContextLen]
        int count = 0;
    };

    // ngram_len = N - 1 (tokens after the key), capacity = entries kept per key.
    NgramPool(int ngram_len, int capacity);

    // ngram [ngram_len]; context [kContextLen] (oldest first, kUnknown allowed) or null = unknown.
    // Refreshing an entry with a null context keeps the context it had.
    void insert(TokenId key, const TokenId* ngram, NgramSource source,
                const TokenId* context = nullptr);
    Candidates find(TokenId key) const;
    // Indices into find(key) of at most `max_count` entries, best first: the most trailing
    // context tokens equal to `recent` ([kContextLen] tokens before the key now, oldest first;
    // kUnknown never matches), then the newest. `order` is overwritten. Returns find(key).
    Candidates select(TokenId key, const TokenId* recent, int max_count,
                      std::vector<int>* order) const;
    // How many trailing tokens of an entry's `context` equal `recent` (both [kContextLen], oldest
    // first; kUnknown never matches): 0 .. kContextLen.
    static int matched_context(const TokenId* context, const TokenId* recent) {
        int m = 0;
        while (m < kContextLen && context[kContextLen - 1 - m] != kUnknown &&
               context[kContextLen - 1 - m] == recent[kContextLen - 1 - m]) {
            ++m;
        }
        return m;
    }
    // The kContextLen tokens of `text` before index `at` (kUnknown before the start) into `out`.
    static void context_before(const TokenId* text, int64_t at, TokenId* out) {
        for (int j = 0; j < kContextLen; ++j) {
            const int64_t i = at - kContextLen + j;
            out[j] = i >= 0 ? text[i] : kUnknown;
        }
    }
    void clear() { lists_.clear(); }

    int ngram_len() const { return ngram_len_; }
    int capacity() const { return capacity_; }
    int64_t size() const;  // n-grams over all keys

    // The same pool for another (N - 1, G): every entry's first ngram_len tokens (entries shorter
    // than that are dropped), each key keeping its `capacity` most recent. Order is kept.
    NgramPool reshaped(int ngram_len, int capacity) const;

    // Binary form (little-endian int32/uint32, see docs/session.md): ngram_len, capacity, keys,
    // then per key its id, count and entries (source byte, tokens, context), oldest first.
    void write(std::ostream& out) const;
    // Reads what write() wrote. `name` names the source in errors. `with_contexts` = false reads
    // the version-1 form, whose entries have no context. Throws ConfigError naming the field when
    // the data is truncated or out of range (ids must be in [0, vocab_size); context ids may also
    // be kUnknown).
    static NgramPool read(std::istream& in, const std::string& name, int vocab_size,
                          bool with_contexts = true);

  private:
    friend bool operator==(const NgramPool& a, const NgramPool& b);
    struct List {
        std::vector<TokenId> tokens;       // [count * ngram_len]
        std::vector<NgramSource> sources;  // [count]
        std::vector<TokenId> contexts;     // [count * kContextLen]
    };
    int ngram_len_;
    int capacity_;
    std::unordered_map<TokenId, List> lists_;
};

// Same shape and the same lists (order included).
bool operator==(const NgramPool& a, const NgramPool& b);

}  // namespace pylookahead
