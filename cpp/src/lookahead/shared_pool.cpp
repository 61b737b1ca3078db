#include "lookahead/shared_pool.h"

namespace pylookahead {

int64_t SharedPool::size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pool_.size();
}

void SharedPool::start_run(int ngram_len, int capacity, bool keep) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!keep) {
        pool_ = NgramPool(ngram_len, capacity);
        texts_.clear();
        text_tokens_ = 0;
        successors_.reset(0);
        return;
    }
    if (pool_.ngram_len() < ngram_len && !texts_.empty()) {
        pool_ = pool_from_texts_locked(ngram_len, capacity);  // cutting cannot lengthen the entries
    } else if (pool_.ngram_len() != ngram_len || pool_.capacity() != capacity) {
        pool_ = pool_.reshaped(ngram_len, capacity);
    }
}

void SharedPool::start_successors(int k) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (successors_.k() != k) successors_.reset(k);
}

void SharedPool::add_text(std::vector<TokenId> text) {
    std::lock_guard<std::mutex> lock(mutex_);
    add_text_locked(std::move(text));
}

void SharedPool::add_text_locked(std::vector<TokenId> text) {
    text_tokens_ += static_cast<int64_t>(text.size());
    texts_.push_back(std::move(text));
    while (texts_.size() > 1 && text_tokens_ > kMaxTextTokens) {
        text_tokens_ -= static_cast<int64_t>(texts_.front().size());
        texts_.pop_front();
    }
}

NgramPool SharedPool::pool_from_texts(int ngram_len, int capacity) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pool_from_texts_locked(ngram_len, capacity);
}

NgramPool SharedPool::pool_from_texts_locked(int ngram_len, int capacity) const {
    NgramPool out(ngram_len, capacity);
    TokenId context[NgramPool::kContextLen];
    for (const std::vector<TokenId>& text : texts_) {
        const int64_t size = static_cast<int64_t>(text.size());
        for (int64_t key = 0; key + ngram_len < size; ++key) {
            NgramPool::context_before(text.data(), key, context);
            out.insert(text[key], text.data() + key + 1, NgramSource::kSeed, context);
        }
    }
    return out;
}

std::pair<NgramPool, SharedPool::Texts> SharedPool::snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {pool_, texts_};
}

void SharedPool::replace(NgramPool pool, Texts texts) {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_ = std::move(pool);
    successors_.reset(0);
    texts_.clear();
    text_tokens_ = 0;
    for (std::vector<TokenId>& text : texts) add_text_locked(std::move(text));
}

SharedPool::Texts SharedPool::texts() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return texts_;
}

int64_t SharedPool::text_tokens() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return text_tokens_;
}

}  // namespace pylookahead
