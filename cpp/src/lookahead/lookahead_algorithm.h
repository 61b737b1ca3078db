// Lookahead decoding as plain data in, plain data out (no model, no tensors): the Jacobi window,
// the n-gram pool and the verifier composed into one step. The decode loop drives it:
//
//   start(prompt, first)                 once, after prefill produced `first`
//   loop: tokens = prepare(x)            [T] tokens of the step for input token x
//         model.forward_step(tokens, p + layout().offsets, layout().mask, layout().out_rows)
//         outcome = update(argmax)       emitted tokens, rows to commit; window and pool advance
//
// Differences from the reference code (hao-ai-lab/LookaheadDecoding), all deliberate:
//   - every level is filled from step 1 with prompt tokens (no N-2 growing warm-up steps), so
//     every step has the same T = (W + G) * (N - 1) tokens; missing candidates are padded;
//   - N = 2 (pure Jacobi with 1-token candidates) is supported;
//   - when all N-1 candidate tokens match, the bonus token is kept: a step emits 1..N tokens;
//   - seeding adds every n-gram that ends in an emitted token (not the repo's corrupted history).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lookahead/jacobi_window.h"
#include "lookahead/ngram_pool.h"
#include "lookahead/step_layout.h"
#include "pylookahead/config.h"
#include "pylookahead/types.h"

namespace pylookahead {

// What one step produced.
struct StepOutcome {
    std::vector<TokenId> emitted;      // [m + 1] accepted candidate tokens, then the bonus token
    int candidate = -1;                // accepted verification slot, -1 when m = 0
    int num_accepted = 0;              // m
    NgramSource source = NgramSource::kSeed;  // of the accepted pool entry (meaningful when m >= 1)
    // [m + 1] step rows to commit, ascending: x, then the accepted candidate's first m rows. If
    // the caller keeps only the first e emitted tokens, it commits the first e rows.
    std::vector<int32_t> commit_rows;
    // For the automatic planner's statistics:
    int num_candidates = 0;     // real (unpadded) candidates verified this step
    int window_candidates = 0;  // of them, harvested from the Jacobi window (NgramSource::kWindow)
    int window_matched = 0;     // most leading tokens matched by one window candidate (0 if none)
};

// State of one generation. Not thread-safe; cheap to restart with start().
class LookaheadAlgorithm {
  public:
    // `config` must be valid (LookaheadConfig::validate()). `pool`: where the n-grams live (kept
    // across generations, maybe shared with other threads; every access is under its mutex);
    // null = a private pool.
    explicit LookaheadAlgorithm(const LookaheadConfig& config,
                                std::shared_ptr<SharedPool> pool = nullptr);

    const StepBudget& budget() const { return layout_.budget; }
    const StepLayout& layout() const { return layout_; }
    // The pool, unlocked: for single-threaded callers (tests). pool_size() locks.
    const NgramPool& pool() const { return shared_->pool; }
    int64_t pool_size() const;
    const JacobiWindow& window() const { return window_; }
    // Real (unpadded) candidates of the last prepare(); they fill the first verification slots,
    // so rows [0, budget().verify_begin + prepared_candidates() * (N-1)) hold every real row.
    int prepared_candidates() const { return num_candidates_; }

    // Clears the pool (keep_pool: keeps its n-grams instead, reshaped to this config's N and G
    // when they differ), fills the window from `prompt` and, with seed_from_prompt, puts every
    // N-gram of prompt + first_token in the pool. first_token = the prefill's argmax.
    void start(const std::vector<TokenId>& prompt, TokenId first_token, bool keep_pool = false);

    // Tokens of the step whose input token is x (the last emitted token): [T], valid until the
    // next call. The verification slots hold the pool's best G entries for key x
    // (NgramPool::select with the tokens before x), best first.
    const std::vector<TokenId>& prepare(TokenId x);

    // argmax [R]: the argmax of layout().out_rows for the tokens of the last prepare().
    // Verifies, harvests the window into the pool, slides the window and, with seeding, adds
    // the n-grams ending in the emitted tokens.
    StepOutcome update(const std::vector<TokenId>& argmax);

  private:
    void append_history(const TokenId* tokens, int n);  // caller holds shared_->mutex
    void push_recent(const TokenId* tokens, int n);

    LookaheadConfig config_;
    StepLayout layout_;
    std::shared_ptr<SharedPool> shared_;          // never null
    JacobiWindow window_;
    std::vector<TokenId> history_;                // prompt + emitted tokens (only with seeding)
    std::vector<TokenId> recent_;                 // [kContextLen + 1] last tokens, x last
    std::vector<int> order_;                      // select()'s picks for the last prepare()
    std::vector<TokenId> tokens_;                 // [T] of the last prepare()
    std::vector<NgramSource> candidate_sources_;  // [num_candidates_]
    std::vector<TokenId> next_;                   // [W] new last-level guesses
    int num_candidates_ = 0;                      // real (unpadded) candidates this step
};

}  // namespace pylookahead
