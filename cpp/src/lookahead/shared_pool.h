// The n-gram pool that outlives one generation: a Session keeps one across calls
// (GenerationConfig::keep_pool), and Sessions may share one from several threads
// (Session::share_pool). Every method locks the pool's mutex; nothing reaches the pool or its texts
// without it. std-only.
//
// It also keeps the texts (prompt + output) of the generations that ran lookahead on it, newest
// last, up to kMaxTextTokens tokens: a run whose N is larger than the pool's rebuilds the pool from
// them (cutting entries can only shorten them, so a larger N would otherwise start empty), and
// suffix lookup searches them; and token recycling's SuccessorTable, so that what a run learned of
// the model's next-token choices carries over to the next run on the pool, as the n-grams do.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "lookahead/ngram_pool.h"
#include "lookahead/successor_table.h"

namespace pylookahead {

class SharedPool {
  public:
    using Texts = std::deque<std::vector<TokenId>>;
    static constexpr int64_t kMaxTextTokens = int64_t{1} << 16;

    SharedPool() = default;
    SharedPool(const SharedPool&) = delete;
    SharedPool& operator=(const SharedPool&) = delete;

    int64_t size() const;  // n-grams held
    // Shapes the pool for a run with n-grams of `ngram_len` tokens after the key, `capacity` per
    // key. keep = false empties the pool, its texts and its successor table; keep = true rebuilds
    // it from the texts when ngram_len grew, else reshapes it.
    void start_run(int ngram_len, int capacity, bool keep);
    // Readies the successor table for a run recycling k successors per token: kept when its k
    // is k, else emptied and reshaped.
    void start_successors(int k);
    // Runs f(SuccessorTable&) under the lock; the same rules as read() / write().
    template <class F>
    decltype(auto) with_successors(F&& f) {
        std::lock_guard<std::mutex> lock(mutex_);
        return f(successors_);
    }
    // Runs f(const NgramPool&) / f(NgramPool&) under the lock and returns its result. `f` must not
    // call back into this SharedPool, nor keep references into the pool after it returns.
    template <class F>
    decltype(auto) read(F&& f) const {
        std::lock_guard<std::mutex> lock(mutex_);
        return f(static_cast<const NgramPool&>(pool_));
    }
    template <class F>
    decltype(auto) write(F&& f) {
        std::lock_guard<std::mutex> lock(mutex_);
        return f(pool_);
    }
    // Appends a generation's text, dropping the oldest texts beyond kMaxTextTokens tokens.
    void add_text(std::vector<TokenId> text);
    // A pool of (ngram_len, capacity) holding every n-gram of the texts (with contexts), oldest
    // text first, so each key keeps the most recent.
    NgramPool pool_from_texts(int ngram_len, int capacity) const;
    // Copies of the pool and its texts, taken under one lock (for saving).
    std::pair<NgramPool, Texts> snapshot() const;
    // Replaces the pool and its texts (for loading) and empties the successor table; texts beyond
    // kMaxTextTokens tokens are dropped oldest first, as add_text does.
    void replace(NgramPool pool, Texts texts);

    Texts texts() const;  // a copy
    int64_t text_tokens() const;

  private:
    void add_text_locked(std::vector<TokenId> text);
    NgramPool pool_from_texts_locked(int ngram_len, int capacity) const;

    mutable std::mutex mutex_;
    NgramPool pool_{1, 0};  // reshaped to each lookahead config that uses it
    Texts texts_;
    int64_t text_tokens_ = 0;
    SuccessorTable successors_;
};

}  // namespace pylookahead
