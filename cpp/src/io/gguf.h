// GGUF files (llama.cpp's single-file checkpoints): header, metadata and tensor table, parsed and
// validated over a read-only mmap; the block formats' dequantization. std-only.
//
// Layout (little-endian, versions 2 and 3): "GGUF", u32 version, u64 tensor count, u64 metadata
// count; metadata entries (string key, u32 type, value); tensor infos (string name, u32 dims,
// u64 ne[dims] innermost first, u32 type, u64 offset); padding to `general.alignment` (32 by
// default); the data section, where each tensor starts at its offset (a multiple of the
// alignment). Strings are u64 length + bytes. A 2-D tensor [ne0, ne1] is ne1 rows of ne0
// contiguous elements: the Hugging Face weight [ne1, ne0].
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/mmap_file.h"

namespace pylookahead {

// ggml tensor types this loader reads (values as in the file). Any other type is a ModelLoadError
// naming the tensor and the type number.
enum class GgmlType : uint32_t {
    kF32 = 0,
    kF16 = 1,
    kQ4_0 = 2,
    kQ4_1 = 3,
    kQ5_0 = 6,
    kQ5_1 = 7,
    kQ8_0 = 8,
    kQ4_K = 12,
    kQ5_K = 13,
    kQ6_K = 14,
    kBF16 = 30,
};

const char* ggml_type_name(GgmlType type);
int64_t ggml_block_size(GgmlType type);   // elements per block (1 for the float types)
int64_t ggml_block_bytes(GgmlType type);  // bytes per block

struct GgufTensor {
    std::string name;
    std::string file;  // path of the file that holds it (for messages)
    GgmlType type = GgmlType::kF32;
    std::vector<int64_t> shape;           // outermost first (the reverse of the file's ne[])
    const unsigned char* data = nullptr;  // into the mapped file
    int64_t nbytes = 0;
};

// One metadata value: integers (any width, bool as 0/1), floats, strings; arrays keep their
// element type and count (and their values when the elements are integers).
struct GgufValue {
    enum class Kind { kInt, kFloat, kString, kArray } kind = Kind::kInt;
    int64_t i = 0;
    double f = 0;
    std::string s;
    uint32_t array_type = 0;
    int64_t array_count = 0;
    std::vector<int64_t> array_ints;
};

class GgufFile {
  public:
    // Maps and parses `path`. Throws ModelLoadError naming the file and the offending key or
    // tensor for: a bad magic or version, counts or lengths past the end of the file, an unknown
    // metadata type, a duplicate key or tensor name, an unknown tensor type, a shape with zero,
    // negative or overflowing dims or whose inner dim is not a whole number of blocks, an offset
    // that is unaligned, past the data or overlapping another tensor.
    explicit GgufFile(const std::string& path);

    const std::string& path() const { return file_.path(); }
    const std::map<std::string, GgufTensor>& tensors() const { return tensors_; }
    const GgufTensor* find(const std::string& name) const;
    const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
    const GgufValue* value(const std::string& key) const;

  private:
    MmapFile file_;
    std::map<std::string, GgufValue> metadata_;
    std::map<std::string, GgufTensor> tensors_;
};

// Parses a GGUF image held in memory (for tests); `path` names it in errors.
void parse_gguf(const unsigned char* bytes, size_t size, const std::string& path,
                std::map<std::string, GgufValue>* metadata,
                std::map<std::string, GgufTensor>* tensors);

// Dequantizes `count` consecutive elements (a whole number of blocks) of type `type` at `src`
// into fp32, as ggml defines each format.
void ggml_dequantize(GgmlType type, const unsigned char* src, int64_t count, float* out);

}  // namespace pylookahead
