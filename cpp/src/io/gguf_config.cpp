#include "io/gguf_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "pylookahead/errors.h"

namespace pylookahead {

namespace {

using json = nlohmann::json;

const GgufValue* find_kind(const GgufFile& f, const std::string& key, GgufValue::Kind kind,
                           bool required) {
    const GgufValue* v = f.value(key);
    if (!v) {
        if (required) throw ModelLoadError(f.path() + ": missing required metadata '" + key + "'");
        return nullptr;
    }
    if (v->kind != kind)
        throw ModelLoadError(f.path() + ": metadata '" + key + "' has the wrong type");
    return v;
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
    const std::string arch =
        find_kind(f, "general.architecture", GgufValue::Kind::kString, true)->s;
    json cfg;
    if (arch == "llama") {
        cfg["architectures"] = {"LlamaForCausalLM"};
    } else if (arch == "qwen2") {
        cfg["architectures"] = {"Qwen2ForCausalLM"};
        cfg["use_sliding_window"] = false;
    } else {
        throw ModelLoadError(f.path() + ": unsupported GGUF architecture '" + arch +
                             "' (supported: llama, qwen2)");
    }
    auto int_key = [&](const char* suffix, const char* hf_key, bool required) {
        if (const GgufValue* v =
                find_kind(f, arch + "." + suffix, GgufValue::Kind::kInt, required)) {
            cfg[hf_key] = v->i;
        }
    };
    int_key("block_count", "num_hidden_layers", true);
    int_key("embedding_length", "hidden_size", true);
    int_key("feed_forward_length", "intermediate_size", true);
    int_key("attention.head_count", "num_attention_heads", true);
    int_key("attention.head_count_kv", "num_key_value_heads", false);
    int_key("attention.key_length", "head_dim", false);
    int_key("context_length", "max_position_embeddings", false);
    if (!cfg.contains("num_key_value_heads"))
        cfg["num_key_value_heads"] = cfg["num_attention_heads"];
    if (const GgufValue* v =
            find_kind(f, arch + ".rope.freq_base", GgufValue::Kind::kFloat, false)) {
        cfg["rope_theta"] = v->f;
    }
    if (const GgufValue* v = find_kind(f, arch + ".attention.layer_norm_rms_epsilon",
                                       GgufValue::Kind::kFloat, false)) {
        cfg["rms_norm_eps"] = v->f;
    }
    if (const GgufValue* v =
            find_kind(f, arch + ".rope.scaling.type", GgufValue::Kind::kString, false)) {
        if (v->s != "none") {
            json scaling = {{"rope_type", v->s}};
            if (const GgufValue* fa =
                    find_kind(f, arch + ".rope.scaling.factor", GgufValue::Kind::kFloat, false)) {
                scaling["factor"] = fa->f;
            }
            cfg["rope_scaling"] = scaling;
        }
    }
    if (f.find("rope_freqs.weight")) {
        throw ModelLoadError(
            f.path() +
            ": tensor 'rope_freqs.weight' (llama3 rope scaling) is not supported in GGUF files");
    }
    const GgufTensor* embed = f.find("token_embd.weight");
    if (!embed || embed->shape.size() != 2) {
        throw ModelLoadError(
            f.path() + ": missing tensor 'token_embd.weight' (a 2-D [vocab, hidden] embedding)");
    }
    cfg["vocab_size"] = embed->shape[0];
    cfg["tie_word_embeddings"] = f.find("output.weight") == nullptr;
    json eos = json::array();
    for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
        if (const GgufValue* v = find_kind(f, key, GgufValue::Kind::kInt, false)) {
            if (std::find(eos.begin(), eos.end(), json(v->i)) == eos.end()) eos.push_back(v->i);
        }
    }
    if (!eos.empty()) cfg["eos_token_id"] = eos;
    return parse_model_config(cfg.dump(), "", f.path() + " (metadata)");
}

bool is_gguf_checkpoint(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string gguf_tensor_name(const std::string& hf) {
    static const std::pair<const char*, const char*> kTop[] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
    };
    for (const auto& [from, to] : kTop) {
        if (hf == from) return to;
    }
    static const std::string kLayer = "model.layers.";
    if (hf.compare(0, kLayer.size(), kLayer) != 0) return "";
    const size_t dot = hf.find('.', kLayer.size());
    if (dot == std::string::npos) return "";
    const std::string index = hf.substr(kLayer.size(), dot - kLayer.size());
    const std::string rest = hf.substr(dot + 1);
    static const std::pair<const char*, const char*> kParts[] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.o_proj.bias", "attn_output.bias"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
    };
    for (const auto& [from, to] : kParts) {
        if (rest == from) return "blk." + index + "." + to;
    }
    return "";
}

bool gguf_rows_permuted(const ModelConfig& config, const std::string& hf) {
    if (config.architecture != "LlamaForCausalLM") return false;
    auto ends = [&](const char* s) {
        const std::string t(s);
        return hf.size() >= t.size() && hf.compare(hf.size() - t.size(), t.size(), t) == 0;
    };
    return ends("self_attn.q_proj.weight") || ends("self_attn.k_proj.weight") ||
           ends("self_attn.q_proj.bias") || ends("self_attn.k_proj.bias");
}

}  // namespace pylookahead
