#include "lookahead/lookahead_algorithm.h"

#include <algorithm>

#include "check.h"
#include "lookahead/verifier.h"

namespace pylookahead {

LookaheadAlgorithm::LookaheadAlgorithm(const LookaheadConfig& config,
                                       std::shared_ptr<SharedPool> pool)
    : config_(config),
      layout_(build_step_layout(step_budget(config))),
      shared_(pool ? std::move(pool) : std::make_shared<SharedPool>()),
      window_(config.window_size, config.ngram_size),
      tokens_(layout_.budget.tokens_per_step, 0),
      next_(config.window_size, 0) {}

int64_t LookaheadAlgorithm::pool_size() const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return shared_->pool.size();
}

void LookaheadAlgorithm::start(const std::vector<TokenId>& prompt, TokenId first_token,
                               bool keep_pool) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    NgramPool& pool = shared_->pool;
    const int len = config_.ngram_size - 1;
    const int cap = NgramPool::kept_per_key(config_.verification_set_size);
    if (!keep_pool) {
        pool = NgramPool(len, cap);
        shared_->clear_texts();
    } else if (pool.ngram_len() < len && !shared_->texts.empty()) {
        pool = shared_->pool_from_texts(len, cap);  // cutting cannot lengthen the entries
    } else if (pool.ngram_len() != len || pool.capacity() != cap) {
        pool = pool.reshaped(len, cap);
    }
    history_.clear();
    recent_.assign(NgramPool::kContextLen + 1, NgramPool::kUnknown);
    push_recent(prompt.data(), static_cast<int>(prompt.size()));
    push_recent(&first_token, 1);
    window_.init(prompt, config_.seed);
    if (!config_.seed_from_prompt) return;
    append_history(prompt.data(), static_cast<int>(prompt.size()));
    append_history(&first_token, 1);
}

void LookaheadAlgorithm::push_recent(const TokenId* tokens, int n) {
    for (int i = std::max(0, n - static_cast<int>(recent_.size())); i < n; ++i) {
        std::rotate(recent_.begin(), recent_.begin() + 1, recent_.end());
        recent_.back() = tokens[i];
    }
}

void LookaheadAlgorithm::append_history(const TokenId* tokens, int n) {
    // Adds the N-gram that ends at each new token, oldest first (the newest is the freshest),
    // with the kContextLen tokens before its key.
    const int N = config_.ngram_size;
    TokenId context[NgramPool::kContextLen];
    for (int i = 0; i < n; ++i) {
        history_.push_back(tokens[i]);
        const int64_t size = static_cast<int64_t>(history_.size());
        if (size < N) continue;
        const int64_t start = size - N;  // of the key
        NgramPool::context_before(history_.data(), start, context);
        const TokenId* gram = history_.data() + start;
        shared_->pool.insert(gram[0], gram + 1, NgramSource::kSeed, context);
    }
}

const std::vector<TokenId>& LookaheadAlgorithm::prepare(TokenId x) {
    const StepBudget& b = budget();
    const int len = b.candidate_len();
    const std::vector<TokenId>& cells = window_.cells();
    std::copy(cells.begin(), cells.end(), tokens_.begin());
    tokens_[0] = x;

    auto slots = tokens_.begin() + b.verify_begin;
    {
        // recent_ ends with x: the tokens before it are the context candidates are ranked by.
        std::lock_guard<std::mutex> lock(shared_->mutex);
        const NgramPool::Candidates cands =
            shared_->pool.select(x, recent_.data(), b.verification_set_size, &order_);
        num_candidates_ = static_cast<int>(order_.size());
        candidate_sources_.clear();
        for (int c = 0; c < num_candidates_; ++c) {
            const int i = order_[c];
            candidate_sources_.push_back(cands.sources[i]);
            std::copy_n(cands.tokens + static_cast<size_t>(i) * len, len, slots + c * len);
        }
    }
    std::fill(slots + num_candidates_ * len, tokens_.end(), x);  // padding: outputs ignored
    return tokens_;
}

StepOutcome LookaheadAlgorithm::update(const std::vector<TokenId>& argmax) {
    const StepBudget& b = budget();
    PYLA_CHECK(argmax.size() == layout_.out_rows.size(),
               "argmax has " << argmax.size() << " rows, expected " << layout_.out_rows.size());
    const TokenId x = tokens_[0];
    const TokenId t0 = argmax[0];  // row 0 is out_rows[0] for every N
    std::copy_n(argmax.begin() + layout_.out_last_level, b.window_size, next_.begin());

    VerifyResult verdict = verify_greedy(t0, tokens_.data() + b.verify_begin,
                                         argmax.data() + layout_.out_verify, num_candidates_,
                                         b.candidate_len());
    StepOutcome out;
    out.candidate = verdict.candidate;
    out.num_accepted = verdict.num_accepted;
    out.commit_rows.push_back(0);
    if (verdict.num_accepted > 0) {
        out.source = candidate_sources_[verdict.candidate];
        for (int k = 0; k < verdict.num_accepted; ++k) {
            out.commit_rows.push_back(b.verify_row(verdict.candidate, k));
        }
    }
    out.emitted = std::move(verdict.emitted);
    out.num_candidates = num_candidates_;
    for (int c = 0; c < num_candidates_; ++c) {
        if (candidate_sources_[c] != NgramSource::kWindow) continue;
        ++out.window_candidates;
        out.window_matched = std::max(out.window_matched, verdict.matched[c]);
    }

    {
        std::lock_guard<std::mutex> lock(shared_->mutex);
        window_.harvest(x, next_.data(), &shared_->pool);
        if (config_.seed_from_prompt) {
            append_history(out.emitted.data(), static_cast<int>(out.emitted.size()));
        }
    }
    window_.shift(next_.data());
    push_recent(out.emitted.data(), static_cast<int>(out.emitted.size()));
    return out;
}

}  // namespace pylookahead
