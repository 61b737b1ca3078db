#include "io/safetensors.h"

#include <sys/stat.h>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "io/regular_file.h"
#include "pylookahead/errors.h"

namespace pylookahead {

using json = nlohmann::json;

int stored_dtype_size(StoredDType dtype) {
    switch (dtype) {
        case StoredDType::kF32: return 4;
        case StoredDType::kF16: return 2;
        case StoredDType::kBF16: return 2;
        case StoredDType::kF64: return 8;
    }
    return 0;
}

const char* stored_dtype_name(StoredDType dtype) {
    switch (dtype) {
        case StoredDType::kF32: return "F32";
        case StoredDType::kF16: return "F16";
        case StoredDType::kBF16: return "BF16";
        case StoredDType::kF64: return "F64";
    }
    return "?";
}

namespace {

StoredDType parse_dtype(const std::string& s, const std::string& path, const std::string& name) {
    if (s == "F32") return StoredDType::kF32;
    if (s == "F16") return StoredDType::kF16;
    if (s == "BF16") return StoredDType::kBF16;
    if (s == "F64") return StoredDType::kF64;
    throw ModelLoadError(path + ": tensor '" + name + "' has unsupported dtype '" + s +
                         "' (expected one of F32, F16, BF16, F64)");
}

// Something is at `path` (a file of any type: opening it refuses all but regular files).
bool path_exists(const std::string& path) {
    struct stat st{};
    return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::vector<TensorInfo> parse_safetensors(const unsigned char* bytes, size_t size,
                                          const std::string& path) {
    if (size < 8) {
        throw ModelLoadError(path + ": truncated safetensors file: " + std::to_string(size) +
                             " bytes, expected at least 8 (the header length)");
    }
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
    if (header_len > size - 8) {
        throw ModelLoadError(path + ": corrupt safetensors header: header length " +
                             std::to_string(header_len) + " exceeds the file size " +
                             std::to_string(size) + " - 8");
    }
    json header;
    try {
        header = json::parse(bytes + 8, bytes + 8 + header_len);
    } catch (const json::exception& e) {
        throw ModelLoadError(path + ": corrupt safetensors header: not valid JSON (" +
                             std::string(e.what()) + ")");
    }
    if (!header.is_object()) {
        throw ModelLoadError(path + ": corrupt safetensors header: expected a JSON object");
    }
    const unsigned char* data = bytes + 8 + header_len;
    const uint64_t data_size = size - 8 - header_len;

    std::vector<TensorInfo> out;
    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        if (name == "__metadata__") continue;
        const json& e = it.value();
        auto bad = [&](const std::string& what) {
            return ModelLoadError(path + ": corrupt safetensors header: tensor '" + name + "' " +
                                  what);
        };
        if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
            !e.contains("data_offsets")) {
            throw bad("needs 'dtype', 'shape' and 'data_offsets'");
        }
        if (!e["dtype"].is_string()) throw bad("has a non-string dtype");
        TensorInfo info;
        info.name = name;
        info.file = path;
        info.dtype = parse_dtype(e["dtype"].get<std::string>(), path, name);
        const json& shape = e["shape"];
        if (!shape.is_array()) throw bad("has a shape that is not a list");
        uint64_t numel = 1;
        for (const json& d : shape) {
            if (!d.is_number_unsigned()) throw bad("has a negative or non-integer dimension");
            uint64_t dim = d.get<uint64_t>();
            if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim / 8) {
                throw bad("has a shape too large");
            }
            numel *= dim;
            info.shape.push_back(static_cast<int64_t>(dim));
        }
        const json& off = e["data_offsets"];
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
            !off[1].is_number_unsigned()) {
            throw bad("needs data_offsets = [begin, end] of non-negative integers");
        }
        uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
        if (begin > end || end > data_size) {
            throw bad("has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                      "] out of range: the data section holds " + std::to_string(data_size) +
                      " bytes");
        }
        uint64_t expected = numel * static_cast<uint64_t>(stored_dtype_size(info.dtype));
        if (end - begin != expected) {
            throw bad("has " + std::to_string(end - begin) + " bytes of data, expected " +
                      std::to_string(expected) + " for its shape and dtype");
        }
        info.data = data + begin;
        info.nbytes = static_cast<size_t>(expected);
        out.push_back(std::move(info));
    }
    return out;
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& model_dir) : model_dir_(model_dir) {
    const std::string single = model_dir + "/model.safetensors";
    const std::string index = model_dir + "/model.safetensors.index.json";
    // For each file, the tensors the index says it holds (empty set = no index).
    std::map<std::string, std::set<std::string>> expected;
    if (path_exists(index)) {
        json j;
        const std::string text = *read_regular_file(index, FileError::kLoad, false);
        try {
            j = json::parse(text);
        } catch (const json::exception& e) {
            throw ModelLoadError(index + ": not valid JSON (" + std::string(e.what()) + ")");
        }
        if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
            throw ModelLoadError(index + ": missing the object key 'weight_map'");
        }
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it.value().is_string()) {
                throw ModelLoadError(index + ": weight_map entry '" + it.key() +
                                     "' is not a file name");
            }
            const std::string shard = it.value().get<std::string>();
            if (shard.find('/') != std::string::npos) {
                throw ModelLoadError(index + ": weight_map entry '" + it.key() +
                                     "' names a file outside the directory: '" + shard + "'");
            }
            expected[shard].insert(it.key());
        }
        for (const auto& kv : expected) files_.push_back(model_dir + "/" + kv.first);
    } else if (path_exists(single)) {
        files_.push_back(single);
    } else {
        throw ModelLoadError(model_dir + ": no model.safetensors or model.safetensors.index.json");
    }

    for (const std::string& file : files_) {
        if (!path_exists(file)) {
            throw ModelLoadError(index + ": shard '" + file + "' is missing");
        }
        maps_.push_back(std::make_unique<MmapFile>(file));
        const MmapFile& m = *maps_.back();
        const std::string base = file.substr(file.rfind('/') + 1);
        std::set<std::string> listed;
        if (!expected.empty()) listed = expected[base];
        for (TensorInfo& t : parse_safetensors(m.data(), m.size(), file)) {
            if (!expected.empty() && listed.count(t.name) == 0) {
                throw ModelLoadError(file + ": holds tensor '" + t.name +
                                     "' that the index does not assign to this shard");
            }
            listed.erase(t.name);
            const std::string name = t.name;
            if (!tensors_.emplace(name, std::move(t)).second) {
                throw ModelLoadError(file + ": tensor '" + name + "' appears in two shards");
            }
        }
        if (!listed.empty()) {
            throw ModelLoadError(file + ": the index lists tensor '" + *listed.begin() +
                                 "' in this shard but the shard does not hold it");
        }
    }
}

const TensorInfo& SafetensorsCheckpoint::get(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
        throw ModelLoadError(model_dir_ + ": missing tensor '" + name + "'");
    }
    return it->second;
}

}  // namespace pylookahead
