// safetensors checkpoints: header parsing, validation and mmap'ed tensor data. std-only.
//
// File format: 8-byte little-endian header length H, then H bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section; offsets are relative to the start of the data section.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/mmap_file.h"

namespace pylookahead {

// Element types we can load. Others (int, fp8, ...) are rejected with ModelLoadError.
enum class StoredDType { kF32, kF16, kBF16, kF64 };

// Bytes per element of `dtype`.
int stored_dtype_size(StoredDType dtype);
// "F32" etc.
const char* stored_dtype_name(StoredDType dtype);

struct TensorInfo {
    std::string name;
    StoredDType dtype = StoredDType::kF32;
    std::vector<int64_t> shape;
    const unsigned char* data = nullptr;  // points into the mapped file
    size_t nbytes = 0;
    std::string file;  // path of the file that holds it
};

// Parses a safetensors header held in memory (`bytes`, the whole file). Throws ModelLoadError
// naming `path` and the offending tensor/key for: a file shorter than 8 bytes, a header length
// beyond the file, a header that is not a JSON object, an entry without dtype/shape/data_offsets,
// an unsupported dtype, offsets out of order or past the end of the data, or a byte size that
// disagrees with the shape. TensorInfo::data points into `bytes`.
std::vector<TensorInfo> parse_safetensors(const unsigned char* bytes, size_t size,
                                          const std::string& path);

// All tensors of a checkpoint directory: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json`. Keeps the files mapped while alive.
class SafetensorsCheckpoint {
  public:
    // Throws ModelLoadError naming the directory/file when neither file exists, the index is not
    // valid JSON or lacks "weight_map", a shard is missing, a tensor lives in a shard other than
    // the one the index names, or the same tensor appears twice.
    explicit SafetensorsCheckpoint(const std::string& model_dir);

    const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
    // Throws ModelLoadError naming the tensor and the checkpoint if absent.
    const TensorInfo& get(const std::string& name) const;
    bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
    const std::vector<std::string>& files() const { return files_; }

  private:
    std::string model_dir_;
    std::vector<std::string> files_;
    std::vector<std::unique_ptr<MmapFile>> maps_;
    std::map<std::string, TensorInfo> tensors_;
};

}  // namespace pylookahead
