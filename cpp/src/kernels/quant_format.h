// Quantized weight formats of the engine's linear kernels (kernels/fma_linear.h, and
// kernels/int8_dot_linear.h for kQ8A8): layout, quantization of float weights, and the dequantized
// values the kernels compute with. std-only.
//
// The group formats quantize groups of 32 consecutive inputs (k) of one output column, with fp16
// scales, as GGUF's Q8_0 and Q4_1 do (so those blocks load without re-quantizing):
//   kQ8   w = q * d          q int8 in [-127, 127]      1.0625 bytes per weight
//   kQ4   w = q * d + m      q in [0, 15]               0.625 bytes per weight
//   kQ8A8 w = q * d          as kQ8 (GGUF Q8_0 blocks may hold -128 too), laid out for integer
//                            dot products with int8 activations (int8_dot_linear.h)
// computed in fp32 (q * d is exact there: d is an fp16, |q| < 2^8). The kernel scales per group
// (fma_linear.h); quant_unpack() gives the dequantized weights, the reference of its tolerance.
// One format scales per output column instead (CTranslate2's and TensorRT-LLM's int8 weight-only):
//   kQ8C  w = q * d          q int8 in [-127, 127], one fp32 d per column: 1 + 4 / k bytes per
//                            weight (no scale among the values; the kernel scales once, at the end)
// with w = q * d rounded to fp32 once (the kernel never forms it: it multiplies x by q exactly
// and the column's sum by d).
//
// Layout of W [n, k] (k a multiple of 32): blocks of kQuantBlock = 16 output columns (one 512-bit
// vector of fp32 lanes; 8-lane code reads lanes 0-7 and 8-15 as two halves), and within a block
// one record per group, groups ascending:
//   block b, group g at byte (b * k / 32 + g) * quant_group_bytes(format):
//     kQ8: fp16 d[16], int8 q[32][16]               (q[i][l]: input 32 g + i of column 16 b + l)
//     kQ8A8: fp16 d[16], int8 q[8][16][4]           (q[j][l][t]: input 32 g + 4 j + t of column
//                                                    16 b + l: one 32-bit lane holds 4 inputs)
//     kQ4: fp16 d[16], fp16 m[16], uint8 q[16][16]  (q[j][l]: inputs 32 g + j in the low nibble,
//                                                    32 g + j + 16 in the high one, of column 16 b + l)
//   kQ8C: block b at byte b * (4 + k) * 16: fp32 d[16], then int8 q[k][16] (q[i][l]: input i
//         of column 16 b + l), so one block is one stream of 64 + 16 k bytes
// Columns past n are zero (d = m = 0).
#pragma once

#include <cstdint>

#include "kernels/fma_linear.h"

namespace pylookahead {

constexpr int64_t kQuantGroup = 32;  // inputs per quantization group

bool is_quantized(WeightFormat format);
// Bytes of one group record of one block (544 for kQ8 and kQ8A8, 320 for kQ4; 0 for kQ8C, which
// has no groups).
int64_t quant_group_bytes(WeightFormat format);
// kQ8C: the 16-byte rows of a block before its values (the 16 fp32 scales).
constexpr int64_t kQ8CHeadRows = 4;
// Bytes of the packed W [n, k]; k must be a multiple of kQuantGroup.
int64_t quant_packed_bytes(WeightFormat format, int64_t n, int64_t k);

// fp16 bits of `f`, rounded to nearest even (overflow -> +-inf, as IEEE conversion does).
uint16_t fp16_from_float(float f);
float fp16_to_float(uint16_t h);

// Quantizes W [n, k] fp32 (row c = output column c, contiguous) into `out` (quant_packed_bytes):
//   kQ8, kQ8A8: d = fp16(max |w| / 127), q = round(w / d) clamped to [-127, 127]
//   kQ4: d = fp16((max w - min w) / 15), m = fp16(min w), q = round((w - m) / d) clamped to [0, 15]
//   kQ8C: as kQ8 over the whole column, d = max |w| / 127 in fp32
// (round = to nearest, ties away from zero; d = 0 gives q = 0). Cost: one pass over W.
void quant_pack(WeightFormat format, const float* w, int64_t n, int64_t k, unsigned char* out);

// The group accessors below take the group formats only (kQ8, kQ4, kQ8A8).
// Writes one group of column `c` as given (GGUF blocks): d and m as fp16 bits (m unused by kQ8),
// q[32] the group's values (kQ8/kQ8A8 int8, kQ4 0..15). `out` holds quant_packed_bytes(format, n, k).
void quant_set_group(WeightFormat format, unsigned char* out, int64_t n, int64_t k, int64_t c,
                     int64_t group, uint16_t d, uint16_t m, const int8_t* q);

// Reads back one group of column `c`: q[32] (kQ8/kQ8A8 int8, kQ4 0..15), d and m as fp16 bits
// (m = 0 for kQ8, kQ8A8).
void quant_get_group(WeightFormat format, const unsigned char* packed, int64_t n, int64_t k,
                     int64_t c, int64_t group, int8_t* q, uint16_t* d, uint16_t* m);

// kQ8C: column `c`'s values q[k] and its scale.
void quant_get_channel(const unsigned char* packed, int64_t n, int64_t k, int64_t c, int8_t* q,
                       float* d);

// The dequantized W [n, k] fp32 of a packed one (kQ4: q * d + m rounded once; kQ8C: q * d rounded once).
void quant_unpack(WeightFormat format, const unsigned char* packed, int64_t n, int64_t k, float* w);

}  // namespace pylookahead
