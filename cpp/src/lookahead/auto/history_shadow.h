// The history shadow of automatic lookahead (std-only): a free prompt-lookup run beside every
// generation that feeds the acceptance model and replays the verification-only configs.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "lookahead/auto/planner.h"
#include "lookahead/shared_pool.h"
#include "pylookahead/types.h"

namespace pylookahead {

// The "prompt lookup" that the history part of the pool would do, run on the side for free. It
// keeps its own pool of every n-gram (gamma + 1 tokens) of the prompt and emitted text, with
// contexts, at most kMaxCount per key; for each new token it notes the candidates for it as a key
// and, gamma tokens later, how far the best of them matched, into an AcceptanceModel.
//
// It also replays the verification-only configs (W = 0, N, G) of AutoPlanner::candidate_configs
// on the same text, into ReplayStats: one pool per n-gram length, filled as LookaheadAlgorithm
// seeds its own, and each replay steps from key to key as a real run would (the G best entries
// by NgramPool::select, the longest match plus the bonus token). Within one generation a replay
// takes the same steps as a real run of that config (a test checks it); a real run that keeps a
// pool across calls starts from more n-grams than the replay, which starts from the prompt.
class HistoryShadow {
  public:
    explicit HistoryShadow(int gamma = AutoPlanner::kMaxNgramSize - 1);
    // Starts a generation: pushes the prompt with weight `prompt_weight` per observation (the
    // replays step through it too), then lines the replays up on the first emitted token.
    // `keep_pools`: the replay pools keep the n-grams of earlier generations, as a real run with
    // GenerationConfig::keep_pool keeps its pool; otherwise they start empty.
    void start(const std::vector<TokenId>& prompt, AcceptanceModel* model, ReplayStats* replay,
               double prompt_weight, bool keep_pools = false);
    // Empties the replay pools (Session::reset).
    void clear_pools();
    // Replaces the replay pools with every n-gram of `source`'s texts (Session::load_pool,
    // share_pool; the caller holds its mutex), as a real run that keeps that pool rebuilds it
    // from them for a larger N. N-grams a pool holds beyond its texts (Jacobi-window ones, or
    // text older than SharedPool::kMaxTextTokens) stay unseen.
    void seed_pools(const SharedPool& source);
    // One emitted token (weight 1).
    void push(TokenId token, AcceptanceModel* model, ReplayStats* replay) {
        push(token, model, replay, 1.0);
    }

  private:
    void push(TokenId token, AcceptanceModel* model, ReplayStats* replay, double weight);
    void step_replays(int64_t idx, ReplayStats* replay, double weight);
    struct Pending {
        int64_t index;  // history index of the key
        int count;      // candidates offered
        double weight;
        std::vector<TokenId> tokens;  // [count * gamma]
    };
    struct Replay {
        int ngram_size, verification_set_size;
        int64_t next_key = 0;  // history index of its next step's input token
    };
    static constexpr int kRing = 8;  // > kMaxNgramSize: selections kept for the last keys
    int gamma_;
    std::vector<TokenId> history_;
    std::deque<Pending> pending_;
    std::vector<Replay> replays_;
    int max_replay_g_ = 0;
    // [gamma]: n-gram length len at len - 1; the last one also feeds the acceptance model.
    std::vector<NgramPool> replay_pools_;
    std::vector<std::vector<TokenId>> ranked_;  // [gamma * kRing]: (len, key idx) -> best entries
    std::vector<int> order_;
};

}  // namespace pylookahead
