#include "kernels/quant_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "check.h"

namespace pylookahead {

namespace {

constexpr int64_t kLanes = kQuantBlock;

// Byte offset of the record of (block, group).
int64_t record_at(WeightFormat format, int64_t k, int64_t block, int64_t group) {
    return (block * (k / kQuantGroup) + group) * quant_group_bytes(format);
}

void put_u16(unsigned char* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }
uint16_t get_u16(const unsigned char* p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// kQ8C: bytes of one block of 16 columns (the scales' rows, then k rows of values).
int64_t channel_block_bytes(int64_t k) { return (kQ8CHeadRows + k) * kLanes; }

void check_shape(WeightFormat format, int64_t n, int64_t k) {
    PYLA_CHECK(is_quantized(format), "not a quantized weight format");
    PYLA_CHECK(
        n >= 0 && k > 0 && k % kQuantGroup == 0,
        "quantized W [" << n << ", " << k << "]: k must be a positive multiple of " << kQuantGroup);
}

// Byte of input i (of a group's 32) of lane `lane` among a record's int8 values: kQ8 input-major,
// kQ8A8 in runs of 4 consecutive inputs per lane (the 32-bit lanes of an integer dot product).
int64_t q8_value_at(WeightFormat format, int64_t i, int64_t lane) {
    return format == WeightFormat::kQ8 ? i * kLanes + lane
                                       : (i / 4) * kLanes * 4 + lane * 4 + i % 4;
}

bool is_q8(WeightFormat format) {
    return format == WeightFormat::kQ8 || format == WeightFormat::kQ8A8;
}

// Round to nearest, ties away from zero (std::lround's rule, on a float).
int round_int(float v) { return static_cast<int>(std::lround(v)); }

// The int8 value of v at scale d (kQ8, kQ8A8, kQ8C): round(v / d) in [-127, 127], 0 when d = 0.
int8_t q8_of(float v, float d) {
    return static_cast<int8_t>(d == 0.0f ? 0 : std::clamp(round_int(v / d), -127, 127));
}

void check_group_format(WeightFormat format) {
    PYLA_CHECK(format != WeightFormat::kQ8C, "kQ8C has no groups (quant_get_channel reads it)");
}

}  // namespace

bool is_quantized(WeightFormat format) {
    return is_q8(format) || format == WeightFormat::kQ4 || format == WeightFormat::kQ8C;
}

int64_t quant_group_bytes(WeightFormat format) {
    if (is_q8(format)) return kLanes * 2 + kQuantGroup * kLanes;                    // 544
    if (format == WeightFormat::kQ4) return kLanes * 4 + kQuantGroup * kLanes / 2;  // 320
    return 0;
}

int64_t quant_packed_bytes(WeightFormat format, int64_t n, int64_t k) {
    check_shape(format, n, k);
    if (format == WeightFormat::kQ8C) return (n + kLanes - 1) / kLanes * channel_block_bytes(k);
    return (n + kLanes - 1) / kLanes * (k / kQuantGroup) * quant_group_bytes(format);
}

uint16_t fp16_from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t mag = u & 0x7fffffffu;
    if (mag >= 0x7f800000u) return sign | (mag > 0x7f800000u ? 0x7e00u : 0x7c00u);  // nan, inf
    const int e = static_cast<int>(mag >> 23) - 127;  // unbiased exponent of f
    if (e >= 16) return sign | 0x7c00u;               // beyond fp16: inf
    // Value = sig * 2^shift_from with sig the 24-bit significand; fp16 keeps 11 bits of it
    // (fewer when subnormal, e < -14). Round the dropped bits to nearest even.
    uint32_t sig = (mag & 0x7fffffu) | (e > -127 ? 0x800000u : 0);
    const int drop = e >= -14 ? 13 : 13 + (-14 - e);  // bits of sig below fp16's last place
    if (drop > 24) return sign;                       // below half the smallest subnormal
    const uint32_t kept = sig >> drop, rest = sig & ((1u << drop) - 1), half = 1u << (drop - 1);
    uint32_t r = kept + (rest > half || (rest == half && (kept & 1)));
    // Normal: exponent field e + 15 over a 10-bit mantissa (a carry out of the mantissa bumps the
    // exponent, up to inf); subnormal: r is the mantissa (a carry makes it the smallest normal).
    const uint32_t bits = e >= -14 ? (static_cast<uint32_t>(e + 15) << 10) + (r - 0x400u) : r;
    return sign | static_cast<uint16_t>(std::min<uint32_t>(bits, 0x7c00u));
}

float fp16_to_float(uint16_t h) {
    const int e = (h >> 10) & 31;
    const int m = h & 1023;
    float v;
    if (e == 31) {
        v = m ? NAN : INFINITY;
    } else if (e == 0) {
        v = std::ldexp(static_cast<float>(m), -24);
    } else {
        v = std::ldexp(static_cast<float>(m | 1024), e - 25);
    }
    return (h & 0x8000) ? -v : v;
}

void quant_set_group(WeightFormat format, unsigned char* out, int64_t n, int64_t k, int64_t c,
                     int64_t group, uint16_t d, uint16_t m, const int8_t* q) {
    check_shape(format, n, k);
    check_group_format(format);
    PYLA_CHECK(c >= 0 && c < n && group >= 0 && group < k / kQuantGroup, "quant_set_group index");
    unsigned char* rec = out + record_at(format, k, c / kLanes, group);
    const int64_t lane = c % kLanes;
    put_u16(rec + lane * 2, d);
    if (is_q8(format)) {
        unsigned char* qs = rec + kLanes * 2;
        for (int64_t i = 0; i < kQuantGroup; ++i)
            qs[q8_value_at(format, i, lane)] = static_cast<unsigned char>(q[i]);
        return;
    }
    put_u16(rec + (kLanes + lane) * 2, m);
    unsigned char* qs = rec + kLanes * 4;
    for (int64_t i = 0; i < kQuantGroup; ++i) {
        PYLA_CHECK(q[i] >= 0 && q[i] <= 15, "kQ4 value " << int(q[i]) << " outside [0, 15]");
        // Input i in byte (i % 16, lane): the low nibble for i < 16, the high one for i >= 16.
        unsigned char& byte = qs[(i % 16) * kLanes + lane];
        const int shift = i < 16 ? 0 : 4;
        byte = static_cast<unsigned char>((byte & ~(0xf << shift)) | (q[i] << shift));
    }
}

void quant_pack(WeightFormat format, const float* w, int64_t n, int64_t k, unsigned char* out) {
    std::memset(out, 0, quant_packed_bytes(format, n, k));
    if (format == WeightFormat::kQ8C) {
        for (int64_t c = 0; c < n; ++c) {
            const float* v = w + c * k;
            float amax = 0.0f;
            for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(v[i]));
            const float d = amax / 127.0f;
            unsigned char* block = out + (c / kLanes) * channel_block_bytes(k);
            const int64_t lane = c % kLanes;
            std::memcpy(block + lane * 4, &d, sizeof d);
            unsigned char* qs = block + kQ8CHeadRows * kLanes;
            for (int64_t i = 0; i < k; ++i)
                qs[i * kLanes + lane] = static_cast<unsigned char>(q8_of(v[i], d));
        }
        return;
    }
    int8_t q[kQuantGroup];
    for (int64_t c = 0; c < n; ++c) {
        for (int64_t g = 0; g < k / kQuantGroup; ++g) {
            const float* v = w + c * k + g * kQuantGroup;
            uint16_t d16 = 0, m16 = 0;
            if (is_q8(format)) {
                float amax = 0.0f;
                for (int64_t i = 0; i < kQuantGroup; ++i) amax = std::max(amax, std::fabs(v[i]));
                d16 = fp16_from_float(amax / 127.0f);
                const float d = fp16_to_float(d16);
                for (int64_t i = 0; i < kQuantGroup; ++i) q[i] = q8_of(v[i], d);
            } else {
                const auto [lo, hi] = std::minmax_element(v, v + kQuantGroup);
                d16 = fp16_from_float((*hi - *lo) / 15.0f);
                m16 = fp16_from_float(*lo);
                const float d = fp16_to_float(d16), m = fp16_to_float(m16);
                for (int64_t i = 0; i < kQuantGroup; ++i) {
                    q[i] = static_cast<int8_t>(
                        d == 0.0f ? 0 : std::clamp(round_int((v[i] - m) / d), 0, 15));
                }
            }
            quant_set_group(format, out, n, k, c, g, d16, m16, q);
        }
    }
}

void quant_get_group(WeightFormat format, const unsigned char* packed, int64_t n, int64_t k,
                     int64_t c, int64_t group, int8_t* q, uint16_t* d, uint16_t* m) {
    check_shape(format, n, k);
    check_group_format(format);
    PYLA_CHECK(c >= 0 && c < n && group >= 0 && group < k / kQuantGroup, "quant_get_group index");
    const unsigned char* rec = packed + record_at(format, k, c / kLanes, group);
    const int64_t lane = c % kLanes;
    *d = get_u16(rec + lane * 2);
    if (is_q8(format)) {
        *m = 0;
        for (int64_t i = 0; i < kQuantGroup; ++i)
            q[i] = static_cast<int8_t>(rec[kLanes * 2 + q8_value_at(format, i, lane)]);
        return;
    }
    *m = get_u16(rec + (kLanes + lane) * 2);
    for (int64_t i = 0; i < kQuantGroup; ++i) {
        const unsigned char byte = rec[kLanes * 4 + (i % 16) * kLanes + lane];
        q[i] = static_cast<int8_t>(i < 16 ? byte & 0xf : byte >> 4);
    }
}

void quant_get_channel(const unsigned char* packed, int64_t n, int64_t k, int64_t c, int8_t* q,
                       float* d) {
    check_shape(WeightFormat::kQ8C, n, k);
    PYLA_CHECK(c >= 0 && c < n, "quant_get_channel index");
    const unsigned char* block = packed + (c / kLanes) * channel_block_bytes(k);
    const int64_t lane = c % kLanes;
    std::memcpy(d, block + lane * 4, sizeof *d);
    for (int64_t i = 0; i < k; ++i)
        q[i] = static_cast<int8_t>(block[(kQ8CHeadRows + i) * kLanes + lane]);
}

void quant_unpack(WeightFormat format, const unsigned char* packed, int64_t n, int64_t k,
                  float* w) {
    if (format == WeightFormat::kQ8C) {
        std::vector<int8_t> q(k);
        for (int64_t c = 0; c < n; ++c) {
            float d;
            quant_get_channel(packed, n, k, c, q.data(), &d);
            for (int64_t i = 0; i < k; ++i) w[c * k + i] = static_cast<float>(q[i]) * d;
        }
        return;
    }
    int8_t q[kQuantGroup];
    uint16_t d16, m16;
    for (int64_t c = 0; c < n; ++c) {
        for (int64_t g = 0; g < k / kQuantGroup; ++g) {
            quant_get_group(format, packed, n, k, c, g, q, &d16, &m16);
            const float d = fp16_to_float(d16), m = fp16_to_float(m16);
            float* dst = w + c * k + g * kQuantGroup;
            for (int64_t i = 0; i < kQuantGroup; ++i) {
                volatile float prod = static_cast<float>(q[i]) * d;  // exact; the sum rounds once
                dst[i] = is_q8(format) ? prod : prod + m;
            }
        }
    }
}

}  // namespace pylookahead
