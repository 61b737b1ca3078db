// bf16 values as raw bits (uint16_t) and ATen's conversions between them and fp32, for the
// std-only kernels that reproduce ATen's bf16 arithmetic (rope.h, rms_norm.h). Header-only so the
// conversions inline into those kernels' loops.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace pylookahead {

// Exact: a bf16 value is the top half of an fp32.
inline float bf16_bits_to_float(uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// Round to nearest, ties to even (c10::BFloat16's rule); NaN becomes 0x7fc0.
inline uint16_t float_to_bf16_bits(float f) {
    if (std::isnan(f)) return 0x7fc0;
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// fp32 -> bf16 -> fp32: what ATen keeps of an fp32 intermediate it stores as bf16.
inline float round_to_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

}  // namespace pylookahead
