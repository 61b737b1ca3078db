// A GGUF file's metadata -> ModelConfig, and the Hugging Face names of its tensors. std-only.
#pragma once

#include <string>

#include "io/gguf.h"
#include "io/model_config.h"

namespace pylookahead {

// The config a Hugging Face checkpoint of the same model would have, from `<arch>.*` metadata
// (block_count, embedding_length, feed_forward_length, attention.head_count[_kv],
// attention.key_length, context_length, rope.freq_base, rope.scaling.*,
// attention.layer_norm_rms_epsilon), the embedding's shape (vocab) and tokenizer.ggml.eos_token_id
// (and eot_token_id); validated as parse_model_config() validates config.json. Throws
// ModelLoadError naming the file and key: an architecture other than llama or qwen2, a missing
// or ill-typed key, rope_freqs (llama3 rope scaling), or what parse_model_config() refuses.
ModelConfig gguf_model_config(const GgufFile& file);

// Whether `path` names a GGUF checkpoint (a regular file) rather than a checkpoint directory.
bool is_gguf_checkpoint(const std::string& path);

// The GGUF name of a Hugging Face tensor name ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight"); "" for a name with no GGUF counterpart.
std::string gguf_tensor_name(const std::string& hf_name);

// Whether GGUF stores `hf_name`'s rows permuted (llama.cpp's converter interleaves the two RoPE
// halves of each head of the llama architecture's q and k projections): the Hugging Face row
// h D + j D/2 + i of a head of D rows is GGUF row h D + 2 i + j.
bool gguf_rows_permuted(const ModelConfig& config, const std::string& hf_name);

}  // namespace pylookahead
