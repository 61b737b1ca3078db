// GGUF tensors -> the engine's tensors: dense (dequantized, rows in Hugging Face order) or, for
// the block formats the engine's kernels read as they are, packed without re-quantizing.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <vector>

#include "io/gguf.h"
#include "kernels/fma_linear.h"

namespace pylookahead {

// One GGUF tensor making up rows of a (possibly fused) linear weight.
struct GgufPart {
    const GgufTensor* tensor = nullptr;  // 2-D [rows, k]; owned by the open GgufFile
    int64_t permuted_head_dim = 0;  // > 0: rows stored RoPE-interleaved per head (gguf_config.h)
};

// The engine format that holds `type` exactly: Q8_0 and Q5_0 (its q - 16 fits an int8) -> kQ8;
// Q4_0, Q4_1 -> kQ4 (Q4_0's (q - 8) d as q d + m with m = -8 d, exact in fp16 and fp32);
// nullopt for the others (K-quants: their scales are products, not fp16).
std::optional<WeightFormat> gguf_kept_format(GgmlType type);

// The format blocks kept as `kept` (gguf_kept_format) are packed in when `asked` is asked for,
// or nullopt when they must be quantized again: the same format; kQ8A8 for kQ8 (the same int8
// values and scales, another layout); kQ8 for kQ8C (the file's groups kept: its values are not
// rounded again to a column's scale).
std::optional<WeightFormat> gguf_kept_as(WeightFormat kept, WeightFormat asked);

// The format all `parts` share under gguf_kept_format(), or nullopt.
std::optional<WeightFormat> gguf_kept_format(const std::vector<GgufPart>& parts);

// `part` as an fp32 tensor in Hugging Face row order (shape as stored; 1-D biases too).
at::Tensor gguf_dense(const GgufPart& part);

// The rows of `parts`, concatenated, packed as fma_linear_quantize() packs ([ceil(N/16), K/32,
// record]) with every group's scale, offset and values taken as stored. Every part must be in
// `format` under gguf_kept_format() (kQ8A8 takes kQ8's blocks) and share K.
at::Tensor gguf_pack_kept(const std::vector<GgufPart>& parts, WeightFormat format);

}  // namespace pylookahead
