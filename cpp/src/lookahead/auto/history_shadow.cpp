#include "lookahead/auto/history_shadow.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "check.h"
#include "pylookahead/errors.h"

namespace pylookahead {

HistoryShadow::HistoryShadow(int gamma) : gamma_(gamma) {
    for (const LookaheadConfig& c : AutoPlanner::candidate_configs()) {
        if (c.window_size != 0 || c.ngram_size - 1 > gamma_) continue;
        replays_.push_back(Replay{c.ngram_size, c.verification_set_size});
        max_replay_g_ = std::max(max_replay_g_, c.verification_set_size);
    }
    for (int len = 1; len <= gamma_; ++len) {
        replay_pools_.emplace_back(len, NgramPool::kept_per_key(max_replay_g_));
    }
    // The gamma-gram pool also serves the acceptance model's lookups, which count up to
    // kMaxCount candidates per key.
    PYLA_CHECK(replay_pools_.back().capacity() == AcceptanceModel::kMaxCount,
               "shadow pool keeps " << replay_pools_.back().capacity() << " per key, not "
                                    << AcceptanceModel::kMaxCount);
    ranked_.assign(static_cast<size_t>(gamma_) * kRing, {});
}

void HistoryShadow::start(const std::vector<TokenId>& prompt, AcceptanceModel* model,
                          ReplayStats* replay, double prompt_weight, bool keep_pools) {
    if (!keep_pools) clear_pools();
    history_.clear();
    pending_.clear();
    for (Replay& r : replays_) r.next_key = 0;
    for (TokenId t : prompt) push(t, model, replay, prompt_weight);
    // The generation's first step takes the first emitted token (the next push) as its input,
    // like a real run: realign every replay there.
    for (Replay& r : replays_) r.next_key = static_cast<int64_t>(prompt.size());
}

void HistoryShadow::clear_pools() {
    for (NgramPool& p : replay_pools_) p.clear();
}

void HistoryShadow::seed_pools(const SharedPool& source) {
    for (NgramPool& p : replay_pools_) p = source.pool_from_texts(p.ngram_len(), p.capacity());
}

void HistoryShadow::push(TokenId token, AcceptanceModel* model, ReplayStats* replay,
                         double weight) {
    history_.push_back(token);
    const int64_t idx = static_cast<int64_t>(history_.size()) - 1;
    // The n-grams that end here go in the pools first, as LookaheadAlgorithm seeds them.
    TokenId context[NgramPool::kContextLen];
    for (int len = 1; len <= gamma_ && len <= idx; ++len) {
        const int64_t key = idx - len;
        NgramPool::context_before(history_.data(), key, context);
        replay_pools_[len - 1].insert(history_[key], history_.data() + key + 1, NgramSource::kSeed,
                                      context);
    }
    // Lookups whose continuation is now known.
    while (!pending_.empty() && pending_.front().index + gamma_ <= idx) {
        const Pending& p = pending_.front();
        int best = 0;
        for (int c = 0; c < p.count; ++c) {
            int m = 0;
            while (m < gamma_ && p.tokens[c * gamma_ + m] == history_[p.index + 1 + m]) ++m;
            best = std::max(best, m);
        }
        model->observe_history(p.count, gamma_, best, p.weight);
        pending_.pop_front();
    }
    const NgramPool::Candidates cands = replay_pools_[gamma_ - 1].find(token);
    pending_.push_back(
        Pending{idx, cands.count, weight,
                std::vector<TokenId>(cands.tokens, cands.tokens + cands.count * gamma_)});
    // This key's candidates in every replay pool, best first, as a step on it would pick them.
    NgramPool::context_before(history_.data(), idx, context);
    for (int len = 1; len <= gamma_; ++len) {
        const NgramPool::Candidates c =
            replay_pools_[len - 1].select(token, context, max_replay_g_, &order_);
        std::vector<TokenId>& ranked = ranked_[static_cast<size_t>(len - 1) * kRing + idx % kRing];
        ranked.clear();
        for (int i : order_) {
            ranked.insert(ranked.end(), c.tokens + static_cast<size_t>(i) * len,
                          c.tokens + static_cast<size_t>(i + 1) * len);
        }
    }
    step_replays(idx, replay, weight);
}

void HistoryShadow::step_replays(int64_t idx, ReplayStats* replay, double weight) {
    for (Replay& r : replays_) {
        const int len = r.ngram_size - 1;
        const int64_t key = r.next_key;
        if (idx != key + len) continue;  // its step's candidates are checked once all are known
        const std::vector<TokenId>& ranked =
            ranked_[static_cast<size_t>(len - 1) * kRing + key % kRing];
        const int count = std::min(static_cast<int>(ranked.size()) / len, r.verification_set_size);
        int best = 0;
        for (int c = 0; c < count; ++c) {
            const TokenId* cand = ranked.data() + static_cast<size_t>(c) * len;
            int m = 0;
            while (m < len && cand[m] == history_[key + 1 + m]) ++m;
            best = std::max(best, m);
        }
        replay->record(r.ngram_size, r.verification_set_size, best + 1, count, weight);
        r.next_key = key + best + 1;
    }
}

}  // namespace pylookahead
