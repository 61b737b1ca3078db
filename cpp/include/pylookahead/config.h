// Option structs of the public C++ API. Each field has a default and a one-line meaning.
// validate() throws ConfigError naming the field, the value and the rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pylookahead/types.h"

namespace pylookahead {

// Lookahead decoding (Fu et al., ICML 2024). One step runs a W x (N-1) Jacobi window and up to
// G verification candidates in one forward pass of (W + G) * (N - 1) tokens.
struct LookaheadConfig {
    int window_size = 4;            // W: lookahead columns (>= 1); also n-grams harvested per step
    int ngram_size = 4;             // N: n-gram length (>= 2); a step emits at most N tokens
    int verification_set_size = 4;  // G: candidates verified per step, and pool entries per key (>= 0)
    bool seed_from_prompt = true;   // put every n-gram of the prompt and of the accepted text in the pool
    uint64_t seed = 0;              // seeds the random initial window (drawn from prompt tokens)

    // Tokens in one step: (W + G) * (N - 1).
    int tokens_per_step() const { return (window_size + verification_set_size) * (ngram_size - 1); }
    void validate() const;
};

// Options of one generate() call.
struct GenerationConfig {
    int max_new_tokens = 128;              // stop after this many new tokens (>= 1)
    std::vector<TokenId> stop_token_ids;   // extra end ids, on top of the model's own
    bool use_model_end_ids = true;         // also stop on the checkpoint's eos ids

    void validate() const;
};

// Where and how a model runs.
struct EngineConfig {
    std::string device = "cpu";     // "cpu", "cuda" or "cuda:K"
    std::string dtype = "float32";  // "float32", "bfloat16", "float16" or "float64"
    int num_threads = 0;            // intra-op CPU threads; 0 keeps libtorch's setting

    void validate() const;
};

// Per-session options.
struct SessionConfig {
    int kv_capacity = 0;  // KV cache rows (prompt + new tokens + one step); 0 = min(max_position_embeddings, 4096)

    void validate() const;
};

}  // namespace pylookahead
