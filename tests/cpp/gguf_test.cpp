// io/gguf.h and io/gguf_config.h on GGUF images built here: a valid image parses with every
// field where the format puts it; every truncation and every single-byte change of it is either
// parsed or refused with ModelLoadError (never a crash or an out-of-bounds read: run under
// scripts/sanitize.sh); the metadata becomes the config a checkpoint would have.
#include "io/gguf.h"
#include "io/gguf_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "pylookahead/errors.h"

namespace pylookahead {
namespace {

class Image {
  public:
    template <typename T>
    void put(T v) {
        const auto* p = reinterpret_cast<const unsigned char*>(&v);
        bytes.insert(bytes.end(), p, p + sizeof v);
    }
    void str(const std::string& s) {
        put<uint64_t>(s.size());
        bytes.insert(bytes.end(), s.begin(), s.end());
    }
    void pad(size_t alignment) {
        while (bytes.size() % alignment) bytes.push_back(0);
    }
    std::vector<unsigned char> bytes;
};

// A llama GGUF of one layer (hidden 32, 2 heads of 16, ffn 64, vocab 8), every tensor F32 except
// the Q8_0 attn_q, plus a string array and an int array in the metadata.
std::vector<unsigned char> tiny_image() {
    struct T {
        std::string name;
        std::vector<uint64_t> ne;
        uint32_t type;
    };
    const std::vector<T> tensors = {
        {"token_embd.weight", {32, 8}, 0},      {"output_norm.weight", {32}, 0},
        {"blk.0.attn_norm.weight", {32}, 0},    {"blk.0.ffn_norm.weight", {32}, 0},
        {"blk.0.attn_q.weight", {32, 32}, 8},   {"blk.0.attn_k.weight", {32, 32}, 0},
        {"blk.0.attn_v.weight", {32, 32}, 0},   {"blk.0.attn_output.weight", {32, 32}, 0},
        {"blk.0.ffn_gate.weight", {32, 64}, 0}, {"blk.0.ffn_up.weight", {32, 64}, 0},
        {"blk.0.ffn_down.weight", {64, 32}, 0},
    };
    Image im;
    im.bytes.insert(im.bytes.end(), {'G', 'G', 'U', 'F'});
    im.put<uint32_t>(3);
    im.put<uint64_t>(tensors.size());
    const std::vector<std::pair<std::string, uint32_t>> ints = {
        {"llama.block_count", 1},
        {"llama.embedding_length", 32},
        {"llama.feed_forward_length", 64},
        {"llama.attention.head_count", 2},
        {"llama.attention.head_count_kv", 2},
        {"llama.context_length", 128},
        {"tokenizer.ggml.eos_token_id", 2}};
    im.put<uint64_t>(ints.size() + 4);
    im.str("general.architecture");
    im.put<uint32_t>(8);
    im.str("llama");
    for (const auto& [k, v] : ints) {
        im.str(k);
        im.put<uint32_t>(4);
        im.put<uint32_t>(v);
    }
    im.str("llama.rope.freq_base");
    im.put<uint32_t>(6);
    im.put<float>(10000.0f);
    im.str("tokenizer.ggml.tokens");
    im.put<uint32_t>(9);
    im.put<uint32_t>(8);
    im.put<uint64_t>(2);
    im.str("a");
    im.str("bc");
    im.str("tokenizer.ggml.token_type");
    im.put<uint32_t>(9);
    im.put<uint32_t>(5);
    im.put<uint64_t>(2);
    im.put<int32_t>(1);
    im.put<int32_t>(-3);
    uint64_t offset = 0;
    std::vector<uint64_t> sizes;
    for (const T& t : tensors) {
        im.str(t.name);
        im.put<uint32_t>(t.ne.size());
        uint64_t count = 1;
        for (uint64_t n : t.ne) {
            im.put<uint64_t>(n);
            count *= n;
        }
        im.put<uint32_t>(t.type);
        im.put<uint64_t>(offset);
        const uint64_t size = t.type == 8 ? count / 32 * 34 : count * 4;
        sizes.push_back(size);
        offset += (size + 31) / 32 * 32;
    }
    im.pad(32);
    for (uint64_t size : sizes) {
        for (uint64_t i = 0; i < size; ++i)
            im.bytes.push_back(static_cast<unsigned char>(i % 7 == 0 ? 0x3c : 0));
        im.pad(32);
    }
    return im.bytes;
}

TEST(Gguf, ParsesAValidImage) {
    const std::vector<unsigned char> image = tiny_image();
    std::map<std::string, GgufValue> meta;
    std::map<std::string, GgufTensor> tensors;
    parse_gguf(image.data(), image.size(), "tiny.gguf", &meta, &tensors);
    EXPECT_EQ(meta.at("general.architecture").s, "llama");
    EXPECT_EQ(meta.at("llama.block_count").i, 1);
    EXPECT_EQ(meta.at("tokenizer.ggml.tokens").array_count, 2);
    EXPECT_EQ(meta.at("tokenizer.ggml.token_type").array_ints, (std::vector<int64_t>{1, -3}));
    EXPECT_FLOAT_EQ(static_cast<float>(meta.at("llama.rope.freq_base").f), 10000.0f);
    ASSERT_EQ(tensors.size(), 11u);
    const GgufTensor& q = tensors.at("blk.0.attn_q.weight");
    EXPECT_EQ(q.type, GgmlType::kQ8_0);
    EXPECT_EQ(q.shape, (std::vector<int64_t>{32, 32}));
    EXPECT_EQ(q.nbytes, 32 * 34);
    EXPECT_EQ(tensors.at("blk.0.ffn_down.weight").shape, (std::vector<int64_t>{32, 64}));
    EXPECT_EQ((q.data - image.data()) % 32, 0);
}

TEST(Gguf, EveryTruncationAndByteChangeIsParsedOrRefused) {
    const std::vector<unsigned char> image = tiny_image();
    std::map<std::string, GgufValue> meta;
    std::map<std::string, GgufTensor> tensors;
    // The header and tables end before the data: truncations there and byte flips in them.
    size_t tables_end = 0;
    parse_gguf(image.data(), image.size(), "t", &meta, &tensors);
    for (const auto& [name, t] : tensors) {
        if (tables_end == 0 || static_cast<size_t>(t.data - image.data()) < tables_end)
            tables_end = t.data - image.data();
    }
    int refused = 0;
    for (size_t len = 0; len < image.size(); len += (len < tables_end ? 1 : 97)) {
        std::vector<unsigned char> cut(image.begin(), image.begin() + len);
        meta.clear();
        tensors.clear();
        try {
            parse_gguf(cut.data(), cut.size(), "t", &meta, &tensors);
        } catch (const ModelLoadError&) {
            ++refused;
        }
    }
    EXPECT_GT(refused, 0);
    for (size_t at = 0; at < tables_end; ++at) {
        for (unsigned char flip : {0x01, 0x80, 0xff}) {
            std::vector<unsigned char> bad = image;
            bad[at] ^= flip;
            meta.clear();
            tensors.clear();
            try {
                parse_gguf(bad.data(), bad.size(), "t", &meta, &tensors);
                for (const auto& [name, t] : tensors) {  // whatever parsed lies inside the image
                    ASSERT_GE(t.data, bad.data());
                    ASSERT_LE(t.data + t.nbytes, bad.data() + bad.size()) << name;
                }
            } catch (const ModelLoadError&) {
            }
        }
    }
}

TEST(Gguf, MetadataBecomesTheConfig) {
    const std::vector<unsigned char> image = tiny_image();
    const std::string path = ::testing::TempDir() + "gguf_test_tiny.gguf";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(image.data()), image.size());
    const ModelConfig c = gguf_model_config(GgufFile(path));
    EXPECT_EQ(c.architecture, "LlamaForCausalLM");
    EXPECT_EQ(c.num_hidden_layers, 1);
    EXPECT_EQ(c.hidden_size, 32);
    EXPECT_EQ(c.intermediate_size, 64);
    EXPECT_EQ(c.num_attention_heads, 2);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.vocab_size, 8);
    EXPECT_EQ(c.max_position_embeddings, 128);
    EXPECT_TRUE(c.tie_word_embeddings);  // no output.weight
    EXPECT_EQ(c.eos_token_ids, (std::vector<TokenId>{2}));
    EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
    std::remove(path.c_str());
}

TEST(Gguf, TensorNamesAndRowOrder) {
    EXPECT_EQ(gguf_tensor_name("model.layers.12.mlp.down_proj.weight"), "blk.12.ffn_down.weight");
    EXPECT_EQ(gguf_tensor_name("model.embed_tokens.weight"), "token_embd.weight");
    EXPECT_EQ(gguf_tensor_name("model.layers.0.self_attn.rotary_emb.inv_freq"), "");
    ModelConfig llama;
    llama.architecture = "LlamaForCausalLM";
    ModelConfig qwen;
    qwen.architecture = "Qwen2ForCausalLM";
    EXPECT_TRUE(gguf_rows_permuted(llama, "model.layers.0.self_attn.k_proj.weight"));
    EXPECT_FALSE(gguf_rows_permuted(llama, "model.layers.0.self_attn.v_proj.weight"));
    EXPECT_FALSE(gguf_rows_permuted(qwen, "model.layers.0.self_attn.q_proj.weight"));
}

TEST(Gguf, DequantizesQ8_0AndQ4_1Blocks) {
    unsigned char q8[34] = {0x00, 0x3c};  // d = 1.0
    for (int i = 0; i < 32; ++i)
        q8[2 + i] = static_cast<unsigned char>(static_cast<int8_t>(i - 16));
    float y[32];
    ggml_dequantize(GgmlType::kQ8_0, q8, 32, y);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], static_cast<float>(i - 16));
    unsigned char q41[20] = {0x00, 0x38, 0x00, 0xbc};  // d = 0.5, m = -1
    for (int j = 0; j < 16; ++j) q41[4 + j] = static_cast<unsigned char>(j | ((15 - j) << 4));
    ggml_dequantize(GgmlType::kQ4_1, q41, 32, y);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], 0.5f * j - 1.0f);
        EXPECT_EQ(y[j + 16], 0.5f * (15 - j) - 1.0f);
    }
}

}  // namespace
}  // namespace pylookahead
