// Plain result types of the public C++ API (no torch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pylookahead {

using TokenId = int32_t;

// Why generation ended.
enum class StopReason {
    kEndToken,      // an end id (the model's or GenerationConfig::stop_token_ids) was produced
    kMaxNewTokens,  // GenerationConfig::max_new_tokens reached
    kCallback,      // the on_token callback returned false
};

// Counters of one generate() call.
struct GenerationStats {
    int64_t new_tokens = 0;     // tokens returned (end id included when one stopped generation)
    int64_t steps = 0;          // forward passes after prefill
    int64_t prompt_tokens = 0;  // prompt tokens run in prefill (after any reuse of the cache)
    double prefill_s = 0.0;     // wall time of the prefill forward pass
    double decode_s = 0.0;      // wall time of all steps after prefill
    // accept_histogram[k] = number of steps that emitted k tokens (k = 1..N); index 0 unused.
    std::vector<int64_t> accept_histogram;
    int64_t accepted_from_prompt = 0;  // steps whose accepted n-gram was seeded from prompt/accepted text
    int64_t accepted_from_window = 0;  // steps whose accepted n-gram was harvested from the Jacobi window
    int64_t pool_size = 0;             // n-grams in the pool at the end
    std::vector<double> step_times_s;  // wall time of each step after prefill

    // Tokens emitted per forward pass after prefill (the compression ratio). The first
    // new token comes from the prefill pass, so it is not counted.
    double compression() const {
        return steps > 0 ? static_cast<double>(new_tokens - 1) / static_cast<double>(steps) : 0.0;
    }
};

// Output of one generate() call.
struct GenerationResult {
    std::vector<TokenId> tokens;  // new tokens only, in order
    StopReason stop_reason = StopReason::kMaxNewTokens;
    GenerationStats stats;
};

}  // namespace pylookahead
