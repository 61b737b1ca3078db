#include "io/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "pylookahead/errors.h"

namespace pylookahead {

namespace {

// Metadata value types of the format.
// clang-format off
enum : uint32_t {
    kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32v = 6, kBool = 7,
    kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
// clang-format on

constexpr uint64_t kMaxDims = 4;
constexpr uint64_t kMaxArrayDepth = 1;  // arrays of arrays are refused

// A bounds-checked little-endian cursor over the file image.
class Cursor {
  public:
    Cursor(const unsigned char* data, size_t size, const std::string& path)
        : data_(data), size_(size), path_(path) {}

    size_t pos() const { return pos_; }

    template <typename T>
    T read(const std::string& what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, data_ + pos_, sizeof v);
        pos_ += sizeof v;
        return v;
    }

    std::string string(const std::string& what) {
        const uint64_t len = read<uint64_t>(what + " (length)");
        need(len, what);
        std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
        pos_ += len;
        return s;
    }

    void skip(uint64_t bytes, const std::string& what) {
        need(bytes, what);
        pos_ += bytes;
    }

    [[noreturn]] void fail(const std::string& message) const {
        throw ModelLoadError(path_ + ": " + message);
    }

  private:
    void need(uint64_t bytes, const std::string& what) const {
        if (bytes > size_ - pos_) {
            fail("truncated: " + what + " needs " + std::to_string(bytes) + " bytes at offset " +
                 std::to_string(pos_) + ", the file has " + std::to_string(size_ - pos_) + " left");
        }
    }

    const unsigned char* data_;
    size_t size_;
    size_t pos_ = 0;
    const std::string& path_;
};

int64_t scalar_size(uint32_t type) {
    switch (type) {
        case kU8:
        case kI8:
        case kBool: return 1;
        case kU16:
        case kI16: return 2;
        case kU32:
        case kI32:
        case kF32v: return 4;
        case kU64:
        case kI64:
        case kF64: return 8;
        default: return 0;
    }
}

// Reads one scalar of `type` into v (integers widened; a u64 above INT64_MAX is refused).
void read_scalar(Cursor& c, uint32_t type, GgufValue& v, const std::string& what) {
    v.kind = GgufValue::Kind::kInt;
    switch (type) {
        case kU8: v.i = c.read<uint8_t>(what); break;
        case kI8: v.i = c.read<int8_t>(what); break;
        case kBool: {
            const uint8_t b = c.read<uint8_t>(what);
            if (b > 1) c.fail(what + ": a bool must be 0 or 1 (found " + std::to_string(b) + ")");
            v.i = b;
            break;
        }
        case kU16: v.i = c.read<uint16_t>(what); break;
        case kI16: v.i = c.read<int16_t>(what); break;
        case kU32: v.i = c.read<uint32_t>(what); break;
        case kI32: v.i = c.read<int32_t>(what); break;
        case kI64: v.i = c.read<int64_t>(what); break;
        case kU64: {
            const uint64_t u = c.read<uint64_t>(what);
            if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
                c.fail(what + ": value " + std::to_string(u) + " is too large");
            }
            v.i = static_cast<int64_t>(u);
            break;
        }
        case kF32v:
            v.kind = GgufValue::Kind::kFloat;
            v.f = c.read<float>(what);
            break;
        case kF64:
            v.kind = GgufValue::Kind::kFloat;
            v.f = c.read<double>(what);
            break;
        default: c.fail(what + ": unknown metadata type " + std::to_string(type));
    }
}

GgufValue read_value(Cursor& c, uint32_t type, const std::string& what, uint64_t depth = 0) {
    GgufValue v;
    if (type == kString) {
        v.kind = GgufValue::Kind::kString;
        v.s = c.string(what);
    } else if (type == kArray) {
        if (depth >= kMaxArrayDepth) c.fail(what + ": nested arrays are not supported");
        v.kind = GgufValue::Kind::kArray;
        v.array_type = c.read<uint32_t>(what + " (array type)");
        const uint64_t count = c.read<uint64_t>(what + " (array count)");
        if (count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            c.fail(what + ": array count too large");
        v.array_count = static_cast<int64_t>(count);
        if (v.array_type == kString) {
            for (uint64_t i = 0; i < count; ++i)
                c.skip(c.read<uint64_t>(what + " (string length)"), what);
        } else if (v.array_type == kArray) {
            c.fail(what + ": nested arrays are not supported");
        } else {
            const int64_t size = scalar_size(v.array_type);
            if (size == 0)
                c.fail(what + ": unknown array element type " + std::to_string(v.array_type));
            if (v.array_type == kF32v || v.array_type == kF64) {
                if (count > std::numeric_limits<uint64_t>::max() / size)
                    c.fail(what + ": array too large");
                c.skip(count * size, what);
            } else {
                if (count > std::numeric_limits<uint64_t>::max() / size)
                    c.fail(what + ": array too large");
                // Checked against the file's size before any allocation.
                Cursor probe = c;
                probe.skip(count * size, what);
                v.array_ints.reserve(count);
                for (uint64_t i = 0; i < count; ++i) {
                    GgufValue e;
                    read_scalar(c, v.array_type, e, what);
                    v.array_ints.push_back(e.i);
                }
            }
        }
    } else {
        read_scalar(c, type, v, what);
    }
    return v;
}

}  // namespace

const char* ggml_type_name(GgmlType type) {
    switch (type) {
        case GgmlType::kF32: return "F32";
        case GgmlType::kF16: return "F16";
        case GgmlType::kBF16: return "BF16";
        case GgmlType::kQ4_0: return "Q4_0";
        case GgmlType::kQ4_1: return "Q4_1";
        case GgmlType::kQ5_0: return "Q5_0";
        case GgmlType::kQ5_1: return "Q5_1";
        case GgmlType::kQ8_0: return "Q8_0";
        case GgmlType::kQ4_K: return "Q4_K";
        case GgmlType::kQ5_K: return "Q5_K";
        case GgmlType::kQ6_K: return "Q6_K";
    }
    return "?";
}

int64_t ggml_block_size(GgmlType type) {
    switch (type) {
        case GgmlType::kF32:
        case GgmlType::kF16:
        case GgmlType::kBF16: return 1;
        case GgmlType::kQ4_K:
        case GgmlType::kQ5_K:
        case GgmlType::kQ6_K: return 256;
        default: return 32;
    }
}

int64_t ggml_block_bytes(GgmlType type) {
    switch (type) {
        case GgmlType::kF32: return 4;
        case GgmlType::kF16:
        case GgmlType::kBF16: return 2;
        case GgmlType::kQ4_0: return 18;
        case GgmlType::kQ4_1: return 20;
        case GgmlType::kQ5_0: return 22;
        case GgmlType::kQ5_1: return 24;
        case GgmlType::kQ8_0: return 34;
        case GgmlType::kQ4_K: return 144;
        case GgmlType::kQ5_K: return 176;
        case GgmlType::kQ6_K: return 210;
    }
    return 0;
}

namespace {

std::optional<GgmlType> known_type(uint32_t t) {
    switch (t) {
        case 0:
        case 1:
        case 2:
        case 3:
        case 6:
        case 7:
        case 8:
        case 12:
        case 13:
        case 14:
        case 30: return static_cast<GgmlType>(t);
        default: return std::nullopt;
    }
}

}  // namespace

void parse_gguf(const unsigned char* bytes, size_t size, const std::string& path,
                std::map<std::string, GgufValue>* metadata,
                std::map<std::string, GgufTensor>* tensors) {
    Cursor c(bytes, size, path);
    const uint32_t magic = c.read<uint32_t>("the magic");
    if (std::memcmp(&magic, "GGUF", 4) != 0) c.fail("not a GGUF file (bad magic)");
    const uint32_t version = c.read<uint32_t>("the version");
    if (version != 2 && version != 3) {
        c.fail("unsupported GGUF version " + std::to_string(version) + " (expected 2 or 3)");
    }
    const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
    const uint64_t n_kv = c.read<uint64_t>("the metadata count");
    // Every entry takes at least 8 bytes: counts beyond the file are corrupt, not huge.
    if (n_tensors > size / 8 || n_kv > size / 8) {
        c.fail("tensor count " + std::to_string(n_tensors) + " or metadata count " +
               std::to_string(n_kv) + " exceeds what the file can hold");
    }
    for (uint64_t i = 0; i < n_kv; ++i) {
        const std::string key = c.string("metadata key " + std::to_string(i));
        const uint32_t type = c.read<uint32_t>("the type of metadata '" + key + "'");
        GgufValue v = read_value(c, type, "metadata '" + key + "'");
        if (!metadata->emplace(key, std::move(v)).second)
            c.fail("duplicate metadata key '" + key + "'");
    }
    int64_t alignment = 32;
    if (auto it = metadata->find("general.alignment"); it != metadata->end()) {
        alignment = it->second.i;
        if (it->second.kind != GgufValue::Kind::kInt || alignment <= 0 || alignment > (1 << 20) ||
            (alignment & (alignment - 1)) != 0) {
            c.fail("general.alignment must be a power of two in [1, 2^20] (found " +
                   std::to_string(alignment) + ")");
        }
    }
    struct Pending {
        GgufTensor t;
        uint64_t offset;
    };
    std::vector<Pending> pending;
    pending.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        Pending p;
        p.t.name = c.string("tensor name " + std::to_string(i));
        p.t.file = path;
        const std::string what = "tensor '" + p.t.name + "'";
        const uint32_t dims = c.read<uint32_t>(what + " (dims)");
        if (dims == 0 || dims > kMaxDims) {
            c.fail(what + ": " + std::to_string(dims) + " dims (expected 1 to " +
                   std::to_string(kMaxDims) + ")");
        }
        int64_t count = 1;
        std::vector<int64_t> ne;
        for (uint32_t d = 0; d < dims; ++d) {
            const uint64_t n = c.read<uint64_t>(what + " (shape)");
            if (n == 0 || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
                static_cast<int64_t>(n) > std::numeric_limits<int64_t>::max() / count) {
                c.fail(what + ": dim " + std::to_string(d) + " = " + std::to_string(n) +
                       " is zero or overflows the element count");
            }
            ne.push_back(static_cast<int64_t>(n));
            count *= static_cast<int64_t>(n);
        }
        const uint32_t type = c.read<uint32_t>(what + " (type)");
        const std::optional<GgmlType> t = known_type(type);
        if (!t) c.fail(what + ": unsupported ggml type " + std::to_string(type));
        p.t.type = *t;
        if (ne[0] % ggml_block_size(*t) != 0) {
            c.fail(what + ": inner dim " + std::to_string(ne[0]) + " is not a whole number of " +
                   ggml_type_name(*t) + " blocks (" + std::to_string(ggml_block_size(*t)) + ")");
        }
        // (Checked against the file's size first: the product may not fit in 64 bits.)
        const int64_t blocks = count / ggml_block_size(*t);
        if (blocks > static_cast<int64_t>(size) / ggml_block_bytes(*t)) {
            c.fail(what + ": " + std::to_string(count) +
                   " elements need more bytes than the file has");
        }
        p.t.nbytes = blocks * ggml_block_bytes(*t);
        p.t.shape.assign(ne.rbegin(), ne.rend());
        p.offset = c.read<uint64_t>(what + " (offset)");
        if (p.offset % static_cast<uint64_t>(alignment) != 0) {
            c.fail(what + ": offset " + std::to_string(p.offset) +
                   " is not a multiple of the alignment " + std::to_string(alignment));
        }
        pending.push_back(std::move(p));
    }
    const uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
    if (data_start > size) c.fail("the data section starts past the end of the file");
    const uint64_t data_size = size - data_start;
    // Ranges in file order must not overlap, and each must lie inside the data section.
    std::vector<const Pending*> by_offset;
    for (const Pending& p : pending) by_offset.push_back(&p);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const Pending* a, const Pending* b) { return a->offset < b->offset; });
    uint64_t end_prev = 0;
    const Pending* prev = nullptr;
    for (const Pending* p : by_offset) {
        const uint64_t nbytes = static_cast<uint64_t>(p->t.nbytes);
        if (p->offset > data_size || nbytes > data_size - p->offset) {
            c.fail("tensor '" + p->t.name + "': bytes [" + std::to_string(p->offset) + ", " +
                   std::to_string(p->offset + nbytes) + ") lie past the data section (" +
                   std::to_string(data_size) + " bytes)");
        }
        if (prev && p->offset < end_prev) {
            c.fail("tensor '" + p->t.name + "' overlaps tensor '" + prev->t.name + "'");
        }
        end_prev = p->offset + nbytes;
        prev = p;
    }
    for (Pending& p : pending) {
        p.t.data = bytes + data_start + p.offset;
        const std::string name = p.t.name;
        if (!tensors->emplace(name, std::move(p.t)).second)
            c.fail("duplicate tensor '" + name + "'");
    }
}

GgufFile::GgufFile(const std::string& path) : file_(path) {
    parse_gguf(file_.data(), file_.size(), path, &metadata_, &tensors_);
}

const GgufTensor* GgufFile::find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

const GgufValue* GgufFile::value(const std::string& key) const {
    auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
}

// ---- dequantization ---------------------------------------------------------------------------

namespace {

float half(const unsigned char* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0    ? std::ldexp(static_cast<float>(m), -24)
              : e == 31 ? (m ? NAN : INFINITY)
                        : std::ldexp(static_cast<float>(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block's 12 packed scale bytes.
void scale_min_k4(int j, const unsigned char* q, int* sc, int* mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void block_q4_0(const unsigned char* b, float* y) {
    const float d = half(b);
    for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>((b[2 + j] & 0xF) - 8) * d;
        y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
    }
}

void block_q4_1(const unsigned char* b, float* y) {
    const float d = half(b), m = half(b + 2);
    for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>(b[4 + j] & 0xF) * d + m;
        y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
    }
}

void block_q5(const unsigned char* b, float* y, bool with_min) {
    const float d = half(b), m = with_min ? half(b + 2) : 0.0f;
    const unsigned char* hp = b + (with_min ? 4 : 2);
    uint32_t qh;
    std::memcpy(&qh, hp, 4);
    const unsigned char* qs = hp + 4;
    for (int j = 0; j < 16; ++j) {
        const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
        const int q0 = (qs[j] & 0xF) | h0, q1 = (qs[j] >> 4) | h1;
        if (with_min) {
            y[j] = static_cast<float>(q0) * d + m;
            y[j + 16] = static_cast<float>(q1) * d + m;
        } else {
            y[j] = static_cast<float>(q0 - 16) * d;
            y[j + 16] = static_cast<float>(q1 - 16) * d;
        }
    }
}

void block_q8_0(const unsigned char* b, float* y) {
    const float d = half(b);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void block_q4_k(const unsigned char* b, float* y) {
    const float d = half(b), dmin = half(b + 2);
    const unsigned char* scales = b + 4;
    const unsigned char* q = b + 16;
    for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
        int sc, mn;
        scale_min_k4(is, scales, &sc, &mn);
        const float d1 = d * sc, m1 = dmin * mn;
        scale_min_k4(is + 1, scales, &sc, &mn);
        const float d2 = d * sc, m2 = dmin * mn;
        for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
}

void block_q5_k(const unsigned char* b, float* y) {
    const float d = half(b), dmin = half(b + 2);
    const unsigned char* scales = b + 4;
    const unsigned char* qh = b + 16;
    const unsigned char* ql = b + 48;
    unsigned u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
        int sc, mn;
        scale_min_k4(is, scales, &sc, &mn);
        const float d1 = d * sc, m1 = dmin * mn;
        scale_min_k4(is + 1, scales, &sc, &mn);
        const float d2 = d * sc, m2 = dmin * mn;
        for (int l = 0; l < 32; ++l)
            *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l)
            *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
}

void block_q6_k(const unsigned char* b, float* y) {
    const unsigned char* ql = b;
    const unsigned char* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = half(b + 208);
    for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
    }
}

}  // namespace

void ggml_dequantize(GgmlType type, const unsigned char* src, int64_t count, float* out) {
    const int64_t bs = ggml_block_size(type), bb = ggml_block_bytes(type);
    for (int64_t i = 0; i < count / bs; ++i) {
        const unsigned char* b = src + i * bb;
        float* y = out + i * bs;
        switch (type) {
            case GgmlType::kF32: std::memcpy(y, b, 4); break;
            case GgmlType::kF16: *y = half(b); break;
            case GgmlType::kBF16: {
                const uint32_t u = static_cast<uint32_t>(b[0] | (b[1] << 8)) << 16;
                std::memcpy(y, &u, 4);
                break;
            }
            case GgmlType::kQ4_0: block_q4_0(b, y); break;
            case GgmlType::kQ4_1: block_q4_1(b, y); break;
            case GgmlType::kQ5_0: block_q5(b, y, false); break;
            case GgmlType::kQ5_1: block_q5(b, y, true); break;
            case GgmlType::kQ8_0: block_q8_0(b, y); break;
            case GgmlType::kQ4_K: block_q4_k(b, y); break;
            case GgmlType::kQ5_K: block_q5_k(b, y); break;
            case GgmlType::kQ6_K: block_q6_k(b, y); break;
        }
    }
}

}  // namespace pylookahead
