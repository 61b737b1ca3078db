// Inspecting GGUF files: metadata, the tensor table, one tensor dequantized. Model::load reads
// GGUF files itself; these are for tools and tests.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pylookahead {

struct GgufTensorInfo {
    std::string name;
    std::string type;            // "Q4_1", "F32", ...
    std::vector<int64_t> shape;  // outermost first (a weight [rows, k])
};

struct GgufInfo {
    // Scalar metadata as text (integers and bools as decimal, floats with full precision,
    // strings as they are); an array as "[array of N]".
    std::map<std::string, std::string> metadata;
    std::vector<GgufTensorInfo> tensors;  // by name
};

// Parses and validates `path` as Model::load does. Throws ModelLoadError naming the file and
// the offending key or tensor.
GgufInfo read_gguf_info(const std::string& path);

// Tensor `name` of `path` dequantized to fp32, rows as stored (no un-permuting), flattened; its
// shape (outermost first) into `shape` when given. Throws ModelLoadError when the file is invalid
// or has no such tensor.
std::vector<float> read_gguf_tensor(const std::string& path, const std::string& name,
                                    std::vector<int64_t>* shape = nullptr);

}  // namespace pylookahead
