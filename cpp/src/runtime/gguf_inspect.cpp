#include <cstdio>

#include "io/gguf.h"
#include "pylookahead/errors.h"
#include "pylookahead/gguf.h"

namespace pylookahead {

GgufInfo read_gguf_info(const std::string& path) {
    const GgufFile file(path);
    GgufInfo info;
    for (const auto& [key, v] : file.metadata()) {
        std::string text;
        switch (v.kind) {
            case GgufValue::Kind::kInt: text = std::to_string(v.i); break;
            case GgufValue::Kind::kFloat: {
                char buf[64];
                std::snprintf(buf, sizeof buf, "%.17g", v.f);
                text = buf;
                break;
            }
            case GgufValue::Kind::kString: text = v.s; break;
            case GgufValue::Kind::kArray:
                text = "[array of " + std::to_string(v.array_count) + "]";
                break;
        }
        info.metadata.emplace(key, std::move(text));
    }
    for (const auto& [name, t] : file.tensors())
        info.tensors.push_back({name, ggml_type_name(t.type), t.shape});
    return info;
}

std::vector<float> read_gguf_tensor(const std::string& path, const std::string& name,
                                    std::vector<int64_t>* shape) {
    const GgufFile file(path);
    const GgufTensor* t = file.find(name);
    if (!t) throw ModelLoadError(path + ": no tensor '" + name + "'");
    if (shape) *shape = t->shape;
    int64_t count = 1;
    for (int64_t s : t->shape) count *= s;
    std::vector<float> out(count);
    ggml_dequantize(t->type, t->data, count, out.data());
    return out;
}

}  // namespace pylookahead
