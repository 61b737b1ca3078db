// Lookahead decoding as plain data in, plain data out (no model, no tensors): the Jacobi window,
// the n-gram pool, the draft sources and the tree verifier composed into one step. The decode
// loop drives it:
//
//   start(prompt, first)                 once, after prefill produced `first`
//   loop: plan = prepare(x)              the step's rows for input token x (StepPlan)
//         model.forward_step(plan.tokens, p + plan.offsets, plan.mask, plan.out_rows, ...)
//         outcome = update(argmax)       emitted tokens, rows to commit; window, pool and
//                                        sources advance
//
// Two layouts (LookaheadConfig::tree_rows):
//   - classic (R = 0): the paper's G verification slots of N - 1 tokens, filled from the pool
//     (best first), verified as G separate chains;
//   - tree (R > 0): the proposals of the pool (G n-grams), suffix lookup and token recycling
//     merged into one trie, the R nodes of highest DraftScorer score kept.
// Both verify with verify_tree, so both emit exactly what greedy decoding would.
//
// Differences from the reference code (hao-ai-lab/LookaheadDecoding), all deliberate:
//   - every level is filled from step 1 with prompt tokens (no N-2 growing warm-up steps), so
//     every step has the same window; missing candidates are padded (fixed shapes) or dropped;
//   - N = 2 (pure Jacobi with 1-token candidates) is supported;
//   - when all N-1 candidate tokens match, the bonus token is kept: a step emits 1..N tokens;
//   - seeding adds every n-gram that ends in an emitted token (not the repo's corrupted history).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "lookahead/auto/step_cost_model.h"
#include "lookahead/draft_scorer.h"
#include "lookahead/jacobi_window.h"
#include "lookahead/pool_drafter.h"
#include "lookahead/recycle_drafter.h"
#include "lookahead/shared_pool.h"
#include "lookahead/step_layout.h"
#include "lookahead/step_plan.h"
#include "lookahead/suffix_drafter.h"
#include "lookahead/token_tree.h"
#include "pylookahead/config.h"
#include "pylookahead/types.h"

namespace pylookahead {

// What one step produced.
struct StepOutcome {
    std::vector<TokenId> emitted;  // [m + 1] accepted draft tokens, then the bonus token
    int num_accepted = 0;          // m
    // [m + 1] step rows to commit, ascending: x, then the accepted path's rows. If the caller
    // keeps only the first e emitted tokens, it commits the first e rows.
    std::vector<int32_t> commit_rows;
    // For the automatic planner's statistics:
    int num_candidates = 0;     // classic: real (unpadded) candidates verified; tree: nodes
    int window_candidates = 0;  // classic: of them, harvested from the Jacobi window
    int window_matched = 0;     // classic: most leading tokens matched by one window candidate
};

// State of one generation. Not thread-safe; cheap to restart with start().
class LookaheadAlgorithm {
  public:
    // `config` must be valid (LookaheadConfig::validate()). `pool`: where the n-grams live (kept
    // across generations, maybe shared with other threads; SharedPool locks every access);
    // null = a private pool. fixed_shapes: every plan has config.tokens_per_step() rows (padded;
    // for CUDA graphs), else only its real rows.
    explicit LookaheadAlgorithm(const LookaheadConfig& config,
                                std::shared_ptr<SharedPool> pool = nullptr,
                                bool fixed_shapes = false);

    const StepBudget& budget() const { return budget_; }
    NgramPool pool() const;  // a copy (for tests)
    int64_t pool_size() const;
    const JacobiWindow& window() const { return window_; }
    // k of token recycling (0 = off): the decode loop asks the model for that many successors
    // per out row (StepModel::set_successors) and passes them to update().
    int successors_wanted() const { return config_.recycle_top_k; }
    // Seconds per step by rows (not owned; null = none). With it a tree step keeps only the n
    // best nodes (n <= R) that maximize expected tokens per second, (1 + sum of their scores) /
    // seconds(window rows + n): on a CPU, where rows cost, fewer than R; on a GPU, R.
    void set_step_costs(const StepCostModel* costs) { costs_ = costs; }

    // Clears the pool (keep_pool: keeps its n-grams instead, reshaped to this config's N and G
    // when they differ), fills the window from `prompt` and, with seed_from_prompt, puts every
    // N-gram of prompt + first_token in the pool. first_token = the prefill's argmax. Suffix
    // lookup indexes prompt + first_token, and with keep_pool the pool's kept texts.
    void start(const std::vector<TokenId>& prompt, TokenId first_token, bool keep_pool = false);

    // The rows of the step whose input token is x (the last emitted token), valid until the next
    // call. Classic: the verification slots hold the pool's best G entries for key x
    // (NgramPool::select with the tokens before x), best first.
    const StepPlan& prepare(TokenId x);

    // argmax [R]: the argmax of the last plan's out_rows. successors: null, or [R * k] the k best
    // tokens of each out row for k = successors_k (token recycling). Verifies, harvests the
    // window into the pool, slides the window, feeds the sources and, with seeding, adds the
    // n-grams ending in the emitted tokens.
    StepOutcome update(const std::vector<TokenId>& argmax,
                       const std::vector<TokenId>* successors = nullptr, int successors_k = 0);

  private:
    // Adds the n-grams ending in `tokens` to `pool` (the shared pool, under its lock).
    void append_history(const TokenId* tokens, int n, NgramPool* pool);
    void push_recent(const TokenId* tokens, int n);
    void prepare_classic(TokenId x, std::vector<TreeNode>* nodes);
    void prepare_tree(TokenId x, std::vector<TreeNode>* nodes);

    LookaheadConfig config_;
    StepBudget budget_;
    StepLayout window_layout_;  // the window alone (rows [0, verify_begin))
    bool fixed_shapes_;
    std::shared_ptr<SharedPool> shared_;  // never null
    JacobiWindow window_;
    std::vector<TokenId> history_;  // prompt + emitted tokens (only with seeding)
    std::vector<TokenId> recent_;   // [kContextLen + 1] last tokens, x last
    std::vector<int> order_;        // select()'s picks for the last prepare()
    StepPlan plan_;                 // of the last prepare()
    std::vector<TokenId> next_;     // [W] new last-level guesses
    // Tree mode.
    DraftScorer scorer_;
    TokenTree tree_;
    std::optional<PoolDrafter> pool_drafter_;
    std::optional<SuffixDrafter> suffix_;
    std::optional<RecycleDrafter> recycle_;
    std::vector<TokenId> row_tokens_, row_successors_;  // update() scratch for on_step
    const StepCostModel* costs_ = nullptr;
};

}  // namespace pylookahead
