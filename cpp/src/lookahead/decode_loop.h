// The decoding loop, std-only: prefill, then steps of greedy or lookahead decoding, with stop
// handling and statistics. The model is reached only through the StepModel interface, so the
// very same loop runs the torch engine and the oracle models of the unit tests.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "lookahead/auto/controller.h"
#include "lookahead/sampler.h"
#include "lookahead/shared_pool.h"
#include "pylookahead/config.h"
#include "pylookahead/types.h"

namespace pylookahead {

// A causal LM with a KV cache, seen as a function over one step of tokens.
//
// The cache holds kv_len() committed rows (positions 0..kv_len-1 of the sequence). forward_step()
// runs T new tokens: every row attends to all committed rows, plus the step rows that `mask`
// allows. Their K/V land in scratch rows kv_len .. kv_len+T-1; nothing is committed until
// commit() says which step rows to keep.
class StepModel {
  public:
    virtual ~StepModel() = default;

    // tokens    [T]      token ids of the step
    // positions [T]      absolute positions (RoPE) of each row
    // mask      [T * T]  row-major, mask[q * T + k] != 0 iff step row q may attend step row k;
    //                    nullptr means causal (row q sees rows 0..q)
    // out_rows  [R]      step rows whose argmax is wanted, ascending
    // exact_rows [E]     step rows that may be committed or decide acceptance (the input token and
    //                    the verification candidates), ascending. A model must compute these
    //                    exactly as a one-row step at the same position would (bit for bit), so
    //                    that lookahead output equals greedy output; other rows are free.
    // out_parent [R] or empty: which out rows the caller reads (lookahead/row_reads.h); a model
    //                    may skip the rows it shows are not read and return -1 for them. Empty:
    //                    every row is read.
    // argmax    [R]      out: the token chosen for each row in out_rows: the argmax over the
    //                    vocabulary, or with `sampler` sampler->sample(row logits as fp32, V,
    //                    positions[row] + 1), the position of the token the row predicts; -1
    //                    for a skipped row
    // sampler            nullptr = argmax
    virtual void forward_step(const std::vector<TokenId>& tokens,
                              const std::vector<int32_t>& positions, const uint8_t* mask,
                              const std::vector<int32_t>& out_rows,
                              const std::vector<int32_t>& exact_rows,
                              const std::vector<int32_t>& out_parent, std::vector<TokenId>* argmax,
                              TokenSampler* sampler) = 0;

    // Keeps step rows src_rows[0..n) (ascending, src_rows[i] >= i) as committed rows
    // kv_len .. kv_len+n-1, in that order, and drops the other step rows. kv_len += n.
    virtual void commit(const std::vector<int32_t>& src_rows) = 0;

    // Committed rows.
    virtual int kv_len() const = 0;
    // Total rows (committed + scratch) the cache can hold.
    virtual int kv_capacity() const = 0;
    // Keeps the first `rows` committed rows (rows <= kv_len()), drops the rest.
    virtual void truncate(int rows) = 0;
    // Drops all committed rows (kv_len = 0).
    void reset() { truncate(0); }
    // True if steps must keep the fixed (W + G)(N - 1) rows (e.g. for CUDA-graph replay); false
    // lets the loop drop the padded verification slots of a step (cheaper on a CPU).
    virtual bool prefers_fixed_shapes() const { return false; }

    // Token recycling: k > 0 asks every later forward_step with exact rows to also keep, per
    // out row, the ids of its k highest logits, best first (drafts only: argmax stays the
    // exact choice); 0 stops it. Returns the k it will provide: k, or 0 if it cannot.
    virtual int set_successors(int k) {
        (void)k;
        return 0;
    }
    // [R * k] of the last such forward_step (R out rows, k of set_successors); -1 entries for
    // a row the model skipped (out_parent).
    virtual const std::vector<TokenId>& successors() const {
        static const std::vector<TokenId> kNone;
        return kNone;
    }
};

// Inputs of one generation.
struct DecodeRequest {
    std::vector<TokenId> prompt;               // non-empty
    int max_new_tokens = 128;                  // >= 1
    std::vector<TokenId> end_ids;              // generation stops after emitting any of these
    std::optional<LookaheadConfig> lookahead;  // nullopt = plain greedy (T = 1 per step)
    // Token choice: argmax, or sampling (GenerationConfig's temperature, top_k, top_p, seed).
    GenerationConfig sampling;
    // Committed rows of the model's cache that hold prompt[0..reuse_rows) and are kept (the
    // rest are dropped); 0 <= reuse_rows < prompt size.
    int reuse_rows = 0;
    // Where lookahead keeps its n-grams (null: a private pool per lookahead run), and whether
    // the first lookahead run keeps what the pool already holds.
    std::shared_ptr<SharedPool> pool;
    bool keep_pool = false;
    // Automatic mode (lookahead must be nullopt): asked for the configuration of every step;
    // not owned. The prompt + max_new_tokens + policy->max_tokens_per_step() must fit the cache.
    StepPolicy* policy = nullptr;
    // Seconds per step by tokens (not owned; null = none): a draft tree (LookaheadConfig::
    // tree_rows) then keeps only the nodes whose expected tokens pay for their rows.
    const StepCostModel* step_costs = nullptr;
    // Monotonic seconds for the step timings; empty = std::chrono::steady_clock. Tests pass a
    // simulated clock.
    std::function<double()> clock;
};

// Runs prefill + decode on `model` (whose cache is cut to request.reuse_rows first). Output
// equals plain decoding (one token per step; greedy or sampled) token for token: an end id or
// max_new_tokens reached inside a multi-token acceptance truncates exactly there (the end id is
// kept). `on_tokens` (may be empty) gets each pass's emitted tokens after truncation, starting
// with the prefill's first token, and answers a StreamControl: stop (kCallback unless that chunk
// already hit a stop: kEndToken / kMaxNewTokens win), optionally keeping only a prefix of the
// chunk (then kCallback; the dropped tokens are neither returned nor committed to the cache).
// On return the cache holds prompt + result.tokens minus the last token.
// The request must be valid (Session::generate validates users' requests): a violated invariant
// (an empty prompt, a negative id, max_new_tokens < 1, an invalid LookaheadConfig, both a
// LookaheadConfig and a policy, or prompt + max_new_tokens + one step's tokens > kv_capacity())
// throws InternalError. A callback's bad StreamControl is a ConfigError.
GenerationResult run_decode(
    StepModel& model, const DecodeRequest& request,
    const std::function<StreamControl(const std::vector<TokenId>&)>& on_tokens);

// Options of calibrate_step_costs.
struct CalibrationOptions {
    int vocab_size = 2;      // dummy token ids are drawn from [0, vocab_size)
    int context_rows = 128;  // cached rows the timed steps attend to (at most half the cache)
    int repetitions = 3;     // timed rounds (after one untimed warm-up round), see below
    int max_tokens = 256;    // largest T timed
    // Points beyond 64 tokens are timed only while a step of 64 costs less than this many greedy
    // steps (a device where wide steps are nearly free: more room for lookahead).
    double extend_below = 2.5;
    std::function<double()> clock;  // as DecodeRequest::clock
};

// Times decode steps of T = 1 (a greedy step) and T = 2, 3, 4, 8, 16, 32, 64 (then 128, 256
// while cheap; all <= max_tokens and within the cache), each the real layout of a lookahead
// config with that T (T = 2, 3: W = 0, one candidate of T - 1 tokens; then W = G, N = 3 or 5),
// over a dummy context of context_rows cached rows. The points are timed in rounds (a greedy
// step, then each point once), and a point's cost is the median over rounds of its time over
// its round's greedy step, times the median greedy step: on a shared machine a burst of other
// load or a drift of the clock rate spoils one round, not one point's every run, so the table's
// shape (what lookahead's plans weigh) holds. Cost: (repetitions + 1) rounds of up to 8 steps,
// and as many of 3 for the points beyond 64. The dummy rows
// go after the rows the cache already holds, which are kept (kv_len() is the same on return),
// unless fewer than 128 rows are free after them: then the cache is emptied first (kv_len() = 0
// on return). Returns ascending points, the first for T = 1.
std::vector<StepCost> calibrate_step_costs(StepModel& model, const CalibrationOptions& options);

}  // namespace pylookahead
