#include "model/gguf_weights.h"

#include <cmath>
#include <cstring>

#include "check.h"
#include "kernels/quant_format.h"
#include "model/fma_linear_op.h"
#include "pylookahead/errors.h"

namespace pylookahead {

namespace {

uint16_t u16_at(const unsigned char* p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// The stored row of Hugging Face row r of a part.
int64_t stored_row(const GgufPart& part, int64_t r) {
    const int64_t d = part.permuted_head_dim;
    if (d == 0) return r;
    const int64_t head = r / d, within = r % d, half = within / (d / 2), i = within % (d / 2);
    return head * d + 2 * i + half;
}

}  // namespace

std::optional<WeightFormat> gguf_kept_format(GgmlType type) {
    if (type == GgmlType::kQ8_0 || type == GgmlType::kQ5_0) return WeightFormat::kQ8;
    if (type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1) return WeightFormat::kQ4;
    return std::nullopt;
}

std::optional<WeightFormat> gguf_kept_as(WeightFormat kept, WeightFormat asked) {
    if (kept == asked || (kept == WeightFormat::kQ8 && asked == WeightFormat::kQ8A8)) return asked;
    if (kept == WeightFormat::kQ8 && asked == WeightFormat::kQ8C) return kept;
    return std::nullopt;
}

std::optional<WeightFormat> gguf_kept_format(const std::vector<GgufPart>& parts) {
    if (parts.empty()) return std::nullopt;
    const std::optional<WeightFormat> first = gguf_kept_format(parts.front().tensor->type);
    for (const GgufPart& p : parts) {
        if (gguf_kept_format(p.tensor->type) != first) return std::nullopt;
    }
    return first;
}

at::Tensor gguf_dense(const GgufPart& part) {
    const GgufTensor& t = *part.tensor;
    int64_t count = 1;
    for (int64_t s : t.shape) count *= s;
    at::Tensor out = at::empty(t.shape, at::kFloat);
    ggml_dequantize(t.type, t.data, count, out.data_ptr<float>());
    const int64_t d = part.permuted_head_dim;
    if (d == 0) return out;
    const int64_t rows = t.shape[0];
    PYLA_CHECK(d % 2 == 0 && rows % d == 0,
               "gguf_dense: " << t.name << " rows " << rows << " head_dim " << d);
    // Stored row h D + 2 i + j holds Hugging Face row h D + j D/2 + i.
    std::vector<int64_t> view = {rows / d, d / 2, 2};
    for (size_t i = 1; i < t.shape.size(); ++i) view.push_back(t.shape[i]);
    return out.view(view).transpose(1, 2).reshape(t.shape).contiguous();
}

at::Tensor gguf_pack_kept(const std::vector<GgufPart>& parts, WeightFormat format) {
    const std::optional<WeightFormat> kept = gguf_kept_format(parts);
    PYLA_CHECK(kept && gguf_kept_as(*kept, format) == format,
               "gguf_pack_kept: parts not all in the format");
    const int64_t k = parts.front().tensor->shape.at(1);
    int64_t n = 0;
    for (const GgufPart& p : parts) {
        PYLA_CHECK(p.tensor->shape.size() == 2 && p.tensor->shape[1] == k,
                   "gguf_pack_kept: " << p.tensor->name);
        n += p.tensor->shape[0];
    }
    const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock, groups = k / kQuantGroup;
    at::Tensor out =
        at::zeros({blocks, groups, quant_group_bytes(format)}, fma_linear_storage(format));
    auto* op = static_cast<unsigned char*>(out.data_ptr());
    int8_t q[kQuantGroup];
    int64_t c0 = 0;  // first output row of the part
    for (const GgufPart& p : parts) {
        const GgufTensor& t = *p.tensor;
        const int64_t bb = ggml_block_bytes(t.type);
        for (int64_t r = 0; r < t.shape[0]; ++r) {
            const unsigned char* row = t.data + stored_row(p, r) * groups * bb;
            for (int64_t g = 0; g < groups; ++g) {
                const unsigned char* b = row + g * bb;
                const uint16_t d = u16_at(b);
                uint16_t m = 0;
                if (t.type == GgmlType::kQ8_0) {
                    std::memcpy(q, b + 2, kQuantGroup);
                } else if (t.type == GgmlType::kQ5_0) {
                    // 5-bit q - 16 in [-16, 15]: an int8 value, same scale.
                    uint32_t qh;
                    std::memcpy(&qh, b + 2, sizeof qh);
                    const unsigned char* qs = b + 6;
                    for (int j = 0; j < 16; ++j) {
                        q[j] =
                            static_cast<int8_t>(((qs[j] & 0xF) | (((qh >> j) << 4) & 0x10)) - 16);
                        q[j + 16] =
                            static_cast<int8_t>(((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16);
                    }
                } else {
                    const unsigned char* qs = b + (t.type == GgmlType::kQ4_1 ? 4 : 2);
                    for (int j = 0; j < 16; ++j) {
                        q[j] = static_cast<int8_t>(qs[j] & 0xF);
                        q[j + 16] = static_cast<int8_t>(qs[j] >> 4);
                    }
                    // Q4_0: (q - 8) d = q d + (-8 d); -8 d is exact in fp16 below its overflow.
                    m = t.type == GgmlType::kQ4_1 ? u16_at(b + 2)
                                                  : fp16_from_float(-8.0f * fp16_to_float(d));
                    if (t.type == GgmlType::kQ4_0 && std::isfinite(fp16_to_float(d)) &&
                        !std::isfinite(fp16_to_float(m))) {
                        throw ModelLoadError(t.file + ": tensor '" + t.name +
                                             "': a Q4_0 scale of " +
                                             std::to_string(fp16_to_float(d)) +
                                             " has no int4 offset (-8 d overflows fp16); load it "
                                             "with quantize='none'");
                    }
                }
                quant_set_group(format, op, n, k, c0 + r, g, d, m, q);
            }
        }
        c0 += t.shape[0];
    }
    return out;
}

}  // namespace pylookahead
