// config.json (+ generation_config.json) of a Hugging Face checkpoint -> ModelConfig. std-only.
#pragma once

#include <string>
#include <vector>

#include "pylookahead/types.h"

namespace pylookahead {

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeScaling {
    RopeScalingType type = RopeScalingType::kNone;
    double factor = 1.0;
    double low_freq_factor = 1.0;                 // llama3 only
    double high_freq_factor = 4.0;                // llama3 only
    int original_max_position_embeddings = 8192;  // llama3 only
};

// The decoder-only transformers we run: Llama, Qwen2 and Mistral (full attention) share one
// block (RMSNorm, RoPE, GQA attention, SwiGLU MLP); they differ only in these fields.
struct ModelConfig {
    std::string architecture;  // "LlamaForCausalLM" | "Qwen2ForCausalLM" | "MistralForCausalLM"
    int vocab_size = 0;
    int hidden_size = 0;
    int intermediate_size = 0;
    int num_hidden_layers = 0;
    int num_attention_heads = 0;
    int num_key_value_heads = 0;
    int head_dim = 0;  // defaults to hidden_size / num_attention_heads
    int max_position_embeddings = 0;
    int sliding_window = 0;  // 0 = none (full attention)
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;  // top-level (transformers 4) or rope_parameters (5)
    RopeScaling rope_scaling;
    bool tie_word_embeddings = false;
    bool attention_bias = false;         // q/k/v projections carry a bias (always for Qwen2)
    bool attention_output_bias = false;  // o_proj carries a bias (Llama attention_bias)
    std::vector<TokenId> eos_token_ids;  // generation_config.json, else config.json
};

// Reads `model_dir`/config.json and, if present, generation_config.json. Throws ModelLoadError
// naming the file, the key, the expected and the found value: missing file, invalid JSON,
// unsupported architecture, a missing or ill-typed required key, hidden_act other than silu,
// an unsupported rope type, or inconsistent sizes (e.g. heads not divisible by kv heads).
ModelConfig load_model_config(const std::string& model_dir);

// Same, from JSON text (for tests). `generation_config` may be empty.
ModelConfig parse_model_config(const std::string& config_json, const std::string& generation_json,
                               const std::string& source);

}  // namespace pylookahead
