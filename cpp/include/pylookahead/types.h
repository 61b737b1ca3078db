// Plain result types of the public C++ API (no torch). All are values owned by the caller:
// copy or move them freely; a const instance may be read from any number of threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace pylookahead {

// A token id of the model's vocabulary, in [0, ModelInfo::vocab_size).
using TokenId = int32_t;

// Why generation ended.
enum class StopReason {
    kEndToken,      // an end id (the model's or GenerationConfig::stop_token_ids) was produced
    kMaxNewTokens,  // GenerationConfig::max_new_tokens reached
    kCallback,      // the on_tokens callback asked to stop (e.g. a stop string matched)
};

// What an OnTokens callback (session.h) answers after each chunk of emitted tokens. A plain
// bool converts to it: true goes on, false stops after this chunk.
struct StreamControl {
    bool stop = false;  // end generation after this chunk (StopReason::kCallback)
    int keep = -1;      // with stop: tokens of this chunk to keep, 0 .. chunk size; -1 = all.
                        // Dropped tokens leave no trace: not returned, not in the KV cache.

    StreamControl() = default;
    StreamControl(bool go_on) : stop(!go_on) {}  // NOLINT: implicit on purpose
    // Stop, keeping the first `keep` tokens of the chunk.
    static StreamControl stop_after(int keep) {
        StreamControl c;
        c.stop = true;
        c.keep = keep;
        return c;
    }
};

// One point of a Session's step-cost table (Session::calibrate): a decode forward pass of
// `tokens` tokens (at about 128 cached rows) takes `seconds` of wall time.
struct StepCost {
    int tokens = 1;
    double seconds = 0.0;
};

// A switch made by automatic lookahead (Session::generate with AutoLookahead): from step `step`
// on, the steps run this configuration. The first decision of a generation has step 0.
struct AutoDecision {
    int64_t step = 0;     // index (0-based, after prefill) of the first step that runs it
    int window_size = 0;  // W, N, G of the lookahead config; all 0 = plain greedy steps
                          // (W = 0 alone: verification-only steps)
    int ngram_size = 0;
    int verification_set_size = 0;
    std::string reason;              // "plan": the model's choice; "fallback": lookahead ran slower
                                     // than greedy; "probe": lookahead tried again after a fallback
    double expected_tokens = 1.0;    // the model's tokens per step for it, when chosen
    double predicted_speedup = 1.0;  // its predicted tokens/s over greedy's, when chosen
    double judged_speedup = 0.0;     // when a judgement ended the lookahead run before this one:
                                     // that run's measured tokens/s over greedy's; 0 otherwise
                                     // (the first plan, a probe after greedy steps)
    double greedy_step_s = 0.0;      // the greedy seconds per step that judgement compared with

    bool greedy() const { return ngram_size == 0; }
    // "greedy" or "W,N,G".
    std::string label() const {
        if (greedy()) return "greedy";
        return std::to_string(window_size) + "," + std::to_string(ngram_size) + "," +
               std::to_string(verification_set_size);
    }
};

// Counters of one generate() call. A "step" is one forward pass after the prefill: one token for
// greedy decoding, (W + G) * (N - 1) tokens for Lookahead decoding.
struct GenerationStats {
    int64_t new_tokens = 0;     // tokens returned (end id included when one stopped generation)
    int64_t steps = 0;          // forward passes after prefill
    int64_t prompt_tokens = 0;  // prompt tokens run in prefill (after any reuse of the cache)
    int64_t reused_tokens = 0;  // prompt tokens whose cached K/V rows were reused (reuse_cache)
    double prefill_s = 0.0;     // wall time of the prefill forward pass
    double decode_s = 0.0;      // wall time of all steps after prefill
    // accept_histogram[k] = number of steps that emitted k tokens (k = 1..N; N = 1 for greedy);
    // index 0 unused. Its size is N + 1 (2 for greedy; for automatic lookahead, the largest N it
    // may choose + 1).
    std::vector<int64_t> accept_histogram;
    // Steps whose accepted n-gram was seeded from prompt/accepted text.
    int64_t accepted_from_prompt = 0;
    // Steps whose accepted n-gram was harvested from the Jacobi window.
    int64_t accepted_from_window = 0;
    // Accepted draft tokens (the bonus tokens not counted) by the source that proposed them:
    // [0] history n-grams of the pool (seeded from the prompt and the output), [1] Jacobi-window
    // n-grams, [2] suffix lookup, [3] token recycling (draft_source_names() order).
    std::array<int64_t, 4> accepted_tokens_by_source{};
    int64_t pool_size = 0;             // n-grams in the pool at the end (0 for greedy)
    std::vector<double> step_times_s;  // wall time of each step after prefill; size == steps
    int64_t lookahead_steps = 0;       // steps that ran lookahead (the rest were greedy steps)
    // Out rows of lookahead steps whose lm_head was skipped: their drafts' prefixes were rejected,
    // so verification could not read them (lookahead/row_reads.h). 0 where every row is computed:
    // sampling, token recycling, CUDA, kernels that need padded steps.
    int64_t skipped_head_rows = 0;
    // Automatic lookahead only: each configuration switch, in step order (empty otherwise).
    std::vector<AutoDecision> auto_decisions;
    // CUDA: graphs the Session holds after the call (one per step shape; 0 without graphs or on
    // the CPU) and the device memory their pools reserved.
    int64_t cuda_graphs = 0;
    int64_t cuda_graph_bytes = 0;

    // Tokens emitted per forward pass after prefill (the compression ratio; 1 for greedy). The
    // first new token comes from the prefill pass, so it is not counted. 0 when steps == 0.
    double compression() const {
        return steps > 0 ? static_cast<double>(new_tokens - 1) / static_cast<double>(steps) : 0.0;
    }
};

// Names of GenerationStats::accepted_tokens_by_source's entries, in order:
// {"history", "window", "suffix", "recycle"}.
inline const std::array<const char*, 4>& draft_source_names() {
    static const std::array<const char*, 4> kNames = {"history", "window", "suffix", "recycle"};
    return kNames;
}

// Output of one Session::generate() call.
struct GenerationResult {
    std::vector<TokenId> token_ids;  // new tokens only, in order (the prompt is not repeated)
    StopReason stop_reason = StopReason::kMaxNewTokens;
    GenerationStats stats;
};

}  // namespace pylookahead
