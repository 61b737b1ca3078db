// config.json parsing: both rope spellings, scaling types, defaults, and rejected configs.
#include <gtest/gtest.h>

#include <string>

#include "io/model_config.h"
#include "pylookahead/errors.h"

namespace pylookahead {
namespace {

const char* kBase = R"({
  "architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 64,
  "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
  "eos_token_id": 2 %EXTRA%
})";

std::string cfg(const std::string& extra) {
    std::string s = kBase;
    return s.replace(s.find("%EXTRA%"), 7, extra);
}

std::string error_of(const std::string& json, const std::string& gen = "") {
    try {
        parse_model_config(json, gen, "m/config.json");
    } catch (const ModelLoadError& e) {
        return e.what();
    }
    return "";
}

TEST(ModelConfig, DefaultsAndDerivedFields) {
    ModelConfig c = parse_model_config(cfg(""), "", "m/config.json");
    EXPECT_EQ(c.architecture, "LlamaForCausalLM");
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_EQ(c.eos_token_ids, (std::vector<TokenId>{2}));
}

TEST(ModelConfig, RopeThetaTopLevelTransformers4) {
    ModelConfig c = parse_model_config(cfg(R"(, "rope_theta": 500000.0)"), "", "m/config.json");
    EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
}

TEST(ModelConfig, RopeParametersTransformers5) {
    ModelConfig c = parse_model_config(
        cfg(R"(, "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"})"), "",
        "m/config.json");
    EXPECT_DOUBLE_EQ(c.rope_theta, 100000.0);
    EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
}

TEST(ModelConfig, LinearAndLlama3Scaling) {
    ModelConfig lin = parse_model_config(
        cfg(R"(, "rope_scaling": {"type": "linear", "factor": 2.0})"), "", "m/config.json");
    EXPECT_EQ(lin.rope_scaling.type, RopeScalingType::kLinear);
    EXPECT_DOUBLE_EQ(lin.rope_scaling.factor, 2.0);
    ModelConfig l3 = parse_model_config(
        cfg(R"(, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192})"),
        "", "m/config.json");
    EXPECT_EQ(l3.rope_scaling.type, RopeScalingType::kLlama3);
    EXPECT_EQ(l3.rope_scaling.original_max_position_embeddings, 8192);
    EXPECT_DOUBLE_EQ(l3.rope_theta, 500000.0);
}

TEST(ModelConfig, Qwen2HasQkvBias) {
    std::string s = cfg("");
    s.replace(s.find("LlamaForCausalLM"), 16, "Qwen2ForCausalLM");
    ModelConfig c = parse_model_config(s, "", "m/config.json");
    EXPECT_TRUE(c.attention_bias);
    EXPECT_FALSE(c.attention_output_bias);
}

TEST(ModelConfig, GenerationConfigEosListWins) {
    ModelConfig c = parse_model_config(cfg(""), R"({"eos_token_id": [7, 9]})", "m/config.json");
    EXPECT_EQ(c.eos_token_ids, (std::vector<TokenId>{7, 9}));
}

TEST(ModelConfig, RejectsUnsupportedArchitecture) {
    std::string s = cfg("");
    s.replace(s.find("LlamaForCausalLM"), 16, "GPT2LMHeadModel");
    std::string msg = error_of(s);
    EXPECT_NE(msg.find("unsupported architecture 'GPT2LMHeadModel'"), std::string::npos) << msg;
}

TEST(ModelConfig, RejectsMissingKeyNamingIt) {
    std::string s = cfg("");
    s.replace(s.find("\"hidden_size\": 64,"), 18, "");
    std::string msg = error_of(s);
    EXPECT_NE(msg.find("'hidden_size'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("m/config.json"), std::string::npos) << msg;
}

TEST(ModelConfig, RejectsWrongTypesAndRules) {
    EXPECT_NE(error_of(cfg(R"(, "tie_word_embeddings": "yes")")).find("tie_word_embeddings"),
              std::string::npos);
    EXPECT_NE(error_of(cfg(R"(, "hidden_act": "gelu")")).find("hidden_act"), std::string::npos);
    EXPECT_NE(error_of(cfg(R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0})"))
                  .find("unsupported rope type 'yarn'"),
              std::string::npos);
    std::string s = cfg("");
    s.replace(s.find("\"num_key_value_heads\": 2"), 24, "\"num_key_value_heads\": 3");
    EXPECT_NE(error_of(s).find("multiple of num_key_value_heads"), std::string::npos);
    EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
    EXPECT_NE(error_of(cfg(""), R"({"eos_token_id": 1000})").find("outside the vocabulary"),
              std::string::npos);
}

}  // namespace
}  // namespace pylookahead
