// kernels/bf16.h: ATen's fp32 <-> bf16 conversions.
#include "kernels/bf16.h"

#include <gtest/gtest.h>

#include <cmath>

namespace pylookahead {
namespace {

TEST(Bf16Bits, RoundsToNearestEven) {
    EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
    EXPECT_EQ(float_to_bf16_bits(bf16_bits_to_float(0x3f80) + 0x1p-8f), 0x3f80);    // tie: to even
    EXPECT_EQ(float_to_bf16_bits(bf16_bits_to_float(0x3f81) + 0x1p-8f), 0x3f82);    // tie: to even
    EXPECT_EQ(float_to_bf16_bits(bf16_bits_to_float(0x3f80) + 0x1.8p-8f), 0x3f81);  // above the tie
    EXPECT_EQ(float_to_bf16_bits(-INFINITY), 0xff80);
    EXPECT_EQ(float_to_bf16_bits(NAN), 0x7fc0);
}

TEST(Bf16Bits, WideningIsExactAndRoundTrips) {
    for (uint32_t b = 0; b < 0x10000; ++b) {
        const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
        if (std::isnan(f)) continue;
        ASSERT_EQ(float_to_bf16_bits(f), b);
        ASSERT_EQ(round_to_bf16(f), f);
    }
}

}  // namespace
}  // namespace pylookahead
