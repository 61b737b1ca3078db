#include "io/model_config.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/regular_file.h"
#include "pylookahead/errors.h"

namespace pylookahead {

using json = nlohmann::json;

namespace {

json parse_json(const std::string& text, const std::string& source) {
    try {
        json j = json::parse(text);
        if (!j.is_object()) throw ModelLoadError(source + ": expected a JSON object");
        return j;
    } catch (const json::exception& e) {
        throw ModelLoadError(source + ": not valid JSON (" + std::string(e.what()) + ")");
    }
}

// A JSON integer in [0, INT32_MAX] (larger values are refused, never narrowed).
int checked_int(const json& v, const char* key, const std::string& src) {
    constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
    if (!v.is_number_integer() ||
        (v.is_number_unsigned()
             ? v.get<uint64_t>() > kMax
             : (v.get<int64_t>() < 0 || static_cast<uint64_t>(v.get<int64_t>()) > kMax))) {
        throw ModelLoadError(src + ": key '" + key + "' must be an integer in [0, " +
                             std::to_string(kMax) + "] (found " + v.dump() + ")");
    }
    return static_cast<int>(v.is_number_unsigned() ? v.get<uint64_t>()
                                                   : static_cast<uint64_t>(v.get<int64_t>()));
}

// Integer key; `required` or default.
int get_int(const json& j, const char* key, const std::string& src, bool required, int dflt = 0) {
    if (!j.contains(key) || j[key].is_null()) {
        if (required) throw ModelLoadError(src + ": missing required key '" + key + "'");
        return dflt;
    }
    return checked_int(j[key], key, src);
}

double get_num(const json& j, const char* key, const std::string& src, double dflt) {
    if (!j.contains(key) || j[key].is_null()) return dflt;
    if (!j[key].is_number()) {
        throw ModelLoadError(src + ": key '" + key + "' must be a number (found " + j[key].dump() +
                             ")");
    }
    return j[key].get<double>();
}

bool get_bool(const json& j, const char* key, const std::string& src, bool dflt) {
    if (!j.contains(key) || j[key].is_null()) return dflt;
    if (!j[key].is_boolean()) {
        throw ModelLoadError(src + ": key '" + key + "' must be true or false (found " +
                             j[key].dump() + ")");
    }
    return j[key].get<bool>();
}

std::vector<TokenId> get_ids(const json& j, const char* key, const std::string& src) {
    std::vector<TokenId> ids;
    if (!j.contains(key) || j[key].is_null()) return ids;
    const json& v = j[key];
    auto one = [&](const json& x) { ids.push_back(checked_int(x, key, src)); };
    if (v.is_array()) {
        for (const json& x : v) one(x);
    } else {
        one(v);
    }
    return ids;
}

void parse_rope(const json& cfg, ModelConfig& mc, const std::string& src) {
    // transformers 5 writes rope_parameters {rope_theta, rope_type, ...}; transformers 4 writes a
    // top-level rope_theta and an optional rope_scaling {type|rope_type, factor, ...}.
    const json* scaling = nullptr;
    if (cfg.contains("rope_parameters") && cfg["rope_parameters"].is_object()) {
        const json& rp = cfg["rope_parameters"];
        mc.rope_theta = get_num(rp, "rope_theta", src + " rope_parameters", mc.rope_theta);
        scaling = &rp;
    }
    mc.rope_theta = get_num(cfg, "rope_theta", src, mc.rope_theta);
    if (cfg.contains("rope_scaling") && cfg["rope_scaling"].is_object()) {
        scaling = &cfg["rope_scaling"];
    }
    if (scaling == nullptr) return;
    std::string type = "default";
    if (scaling->contains("rope_type") && (*scaling)["rope_type"].is_string()) {
        type = (*scaling)["rope_type"].get<std::string>();
    } else if (scaling->contains("type") && (*scaling)["type"].is_string()) {
        type = (*scaling)["type"].get<std::string>();
    }
    const std::string ssrc = src + " rope scaling";
    if (type == "default") {
        mc.rope_scaling.type = RopeScalingType::kNone;
    } else if (type == "linear") {
        mc.rope_scaling.type = RopeScalingType::kLinear;
        mc.rope_scaling.factor = get_num(*scaling, "factor", ssrc, 1.0);
    } else if (type == "llama3") {
        mc.rope_scaling.type = RopeScalingType::kLlama3;
        mc.rope_scaling.factor = get_num(*scaling, "factor", ssrc, 8.0);
        mc.rope_scaling.low_freq_factor = get_num(*scaling, "low_freq_factor", ssrc, 1.0);
        mc.rope_scaling.high_freq_factor = get_num(*scaling, "high_freq_factor", ssrc, 4.0);
        mc.rope_scaling.original_max_position_embeddings =
            get_int(*scaling, "original_max_position_embeddings", ssrc, false, 8192);
    } else {
        throw ModelLoadError(src + ": unsupported rope type '" + type +
                             "' (supported: default, linear, llama3)");
    }
    if (mc.rope_scaling.factor <= 0.0) {
        throw ModelLoadError(ssrc + ": factor must be > 0");
    }
}

}  // namespace

ModelConfig parse_model_config(const std::string& config_json, const std::string& generation_json,
                               const std::string& source) {
    const std::string& src = source;
    json cfg = parse_json(config_json, src);
    ModelConfig mc;

    if (!cfg.contains("architectures") || !cfg["architectures"].is_array() ||
        cfg["architectures"].empty() || !cfg["architectures"][0].is_string()) {
        throw ModelLoadError(src + ": missing required key 'architectures' (a list of names)");
    }
    mc.architecture = cfg["architectures"][0].get<std::string>();
    const bool llama = mc.architecture == "LlamaForCausalLM";
    const bool qwen2 = mc.architecture == "Qwen2ForCausalLM";
    const bool mistral = mc.architecture == "MistralForCausalLM";
    if (!llama && !qwen2 && !mistral) {
        throw ModelLoadError(
            src + ": unsupported architecture '" + mc.architecture +
            "' (supported: LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM)");
    }

    mc.vocab_size = get_int(cfg, "vocab_size", src, true);
    mc.hidden_size = get_int(cfg, "hidden_size", src, true);
    mc.intermediate_size = get_int(cfg, "intermediate_size", src, true);
    mc.num_hidden_layers = get_int(cfg, "num_hidden_layers", src, true);
    mc.num_attention_heads = get_int(cfg, "num_attention_heads", src, true);
    mc.num_key_value_heads =
        get_int(cfg, "num_key_value_heads", src, false, mc.num_attention_heads);
    mc.max_position_embeddings = get_int(cfg, "max_position_embeddings", src, false, 2048);
    mc.rms_norm_eps = get_num(cfg, "rms_norm_eps", src, 1e-6);
    mc.tie_word_embeddings = get_bool(cfg, "tie_word_embeddings", src, false);

    if (mc.vocab_size == 0 || mc.hidden_size == 0 || mc.num_hidden_layers == 0 ||
        mc.num_attention_heads == 0 || mc.num_key_value_heads == 0 || mc.intermediate_size == 0) {
        throw ModelLoadError(src + ": vocab_size, hidden_size, intermediate_size, " +
                             "num_hidden_layers, num_attention_heads and num_key_value_heads " +
                             "must all be > 0");
    }
    if (mc.num_attention_heads % mc.num_key_value_heads != 0) {
        throw ModelLoadError(src + ": num_attention_heads (" +
                             std::to_string(mc.num_attention_heads) +
                             ") must be a multiple of num_key_value_heads (" +
                             std::to_string(mc.num_key_value_heads) + ")");
    }
    int default_head_dim = mc.hidden_size / mc.num_attention_heads;
    mc.head_dim = get_int(cfg, "head_dim", src, false, default_head_dim);
    if (mc.head_dim == 0) mc.head_dim = default_head_dim;
    if (mc.head_dim == 0 || mc.head_dim % 2 != 0) {
        throw ModelLoadError(src + ": head_dim must be even and > 0 (found " +
                             std::to_string(mc.head_dim) + ")");
    }

    std::string act = "silu";
    if (cfg.contains("hidden_act") && cfg["hidden_act"].is_string()) {
        act = cfg["hidden_act"].get<std::string>();
    }
    if (act != "silu") {
        throw ModelLoadError(src + ": unsupported hidden_act '" + act + "' (expected 'silu')");
    }
    if (get_bool(cfg, "mlp_bias", src, false)) {
        throw ModelLoadError(src + ": unsupported mlp_bias = true (expected false)");
    }

    if (qwen2) {
        mc.attention_bias = true;  // Qwen2 always has q/k/v bias and no o_proj bias
    } else if (llama) {
        mc.attention_bias = get_bool(cfg, "attention_bias", src, false);
        mc.attention_output_bias = mc.attention_bias;
    }

    // Sliding-window attention: Qwen2 enables it only with use_sliding_window; Mistral whenever
    // sliding_window is set. The session caps its KV capacity at the window, so that the
    // attention it computes is full attention and exact.
    bool sliding = mistral || (qwen2 && get_bool(cfg, "use_sliding_window", src, false));
    if (sliding && cfg.contains("sliding_window") && !cfg["sliding_window"].is_null()) {
        mc.sliding_window = get_int(cfg, "sliding_window", src, false, 0);
    }

    parse_rope(cfg, mc, src);
    if (mc.rope_theta <= 0.0) throw ModelLoadError(src + ": rope_theta must be > 0");

    mc.eos_token_ids = get_ids(cfg, "eos_token_id", src);
    if (!generation_json.empty()) {
        const std::string gsrc = src.substr(0, src.rfind('/') + 1) + "generation_config.json";
        json gen = parse_json(generation_json, gsrc);
        std::vector<TokenId> ids = get_ids(gen, "eos_token_id", gsrc);
        if (!ids.empty()) mc.eos_token_ids = ids;
    }
    for (TokenId id : mc.eos_token_ids) {
        if (id >= mc.vocab_size) {
            throw ModelLoadError(src + ": eos_token_id " + std::to_string(id) +
                                 " is outside the vocabulary (vocab_size " +
                                 std::to_string(mc.vocab_size) + ")");
        }
    }
    return mc;
}

ModelConfig load_model_config(const std::string& model_dir) {
    const std::string cfg_path = model_dir + "/config.json";
    const std::optional<std::string> cfg = read_regular_file(cfg_path, FileError::kLoad, true);
    if (!cfg) throw ModelLoadError(cfg_path + ": missing file (a checkpoint needs config.json)");
    const std::string gen =
        read_regular_file(model_dir + "/generation_config.json", FileError::kLoad, true)
            .value_or(std::string());
    return parse_model_config(*cfg, gen, cfg_path);
}

}  // namespace pylookahead
