// The public C++ entry points: a loaded Model (weights, shared) and a Session (per-conversation
// state: KV cache, lookahead pool). No torch header is included here.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pylookahead/config.h"
#include "pylookahead/errors.h"
#include "pylookahead/types.h"

namespace pylookahead {

// What a loaded checkpoint is.
struct ModelInfo {
    std::string architecture;          // e.g. "LlamaForCausalLM"
    std::string model_dir;             // the directory it was loaded from
    std::string device;                // device it runs on
    std::string dtype;                 // compute dtype
    int num_layers = 0;
    int hidden_size = 0;
    int num_attention_heads = 0;
    int num_key_value_heads = 0;
    int head_dim = 0;
    int vocab_size = 0;
    int max_position_embeddings = 0;
    std::vector<TokenId> eos_token_ids;  // from generation_config.json, else config.json
};

// Loaded weights. Immutable after load(), so one Model may be shared by many Sessions in
// many threads. Owns device memory for the weights; freed when the last shared_ptr goes.
class Model {
  public:
    // Reads config.json (+ generation_config.json) and model.safetensors or the sharded
    // model.safetensors.index.json from `model_dir`, casts weights to `engine.dtype` and moves
    // them to `engine.device`. Throws ModelLoadError (bad checkpoint) or ConfigError (bad options).
    static std::shared_ptr<const Model> load(const std::string& model_dir,
                                             const EngineConfig& engine = {});
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    const ModelInfo& info() const;

    struct Impl;  // internal (torch-side); opaque to users

  private:
    friend class Session;
    explicit Model(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Called after every step with the tokens that step emitted (already truncated at a stop).
// Return false to stop generation after this step (StopReason::kCallback).
using OnTokens = std::function<bool(const std::vector<TokenId>& tokens)>;

// Generation state for one sequence (batch 1): a static KV cache allocated once at creation
// and the lookahead state. Not thread-safe: use one Session from one thread at a time; distinct
// Sessions (even over one Model) may run in parallel threads.
class Session {
  public:
    explicit Session(std::shared_ptr<const Model> model, const SessionConfig& config = {});
    ~Session();
    Session(Session&&) noexcept;
    Session& operator=(Session&&) noexcept;
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Greedy decoding of `prompt` (token ids). With `lookahead` set, runs Lookahead decoding,
    // whose output equals greedy decoding token for token. Throws ConfigError on bad options,
    // an empty prompt, token ids out of range, or a prompt + max_new_tokens + one step that
    // exceeds the KV capacity.
    GenerationResult generate(const std::vector<TokenId>& prompt, const GenerationConfig& gen = {},
                              const std::optional<LookaheadConfig>& lookahead = std::nullopt,
                              const OnTokens& on_tokens = nullptr);

    // Logits of every prompt position, run as one prefill from an empty cache: [L * V] row-major
    // fp32 (row i predicts token i+1). For parity checks and scoring; resets the cache.
    std::vector<float> prompt_logits(const std::vector<TokenId>& prompt);

    const Model& model() const;
    int kv_capacity() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace pylookahead
