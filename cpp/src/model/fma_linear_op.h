// ATen side of the row-invariant fp32-accumulating linear kernel (kernels/fma_linear.h): packing
// at load and the per-step call, split over threads by column blocks.
#pragma once

#include <ATen/ATen.h>

#include "kernels/cpu_isa.h"
#include "kernels/fma_linear.h"

namespace pylookahead {

// W [N, K] fp32, fp16 or bf16 -> [ceil(N/8), K, 8] in W's dtype (fp32 for fp16 on a path that
// cannot read fp16), rows past N zero.
at::Tensor fma_linear_pack(const at::Tensor& weight, CpuIsa path);

// W [N, K] (any float dtype; K a multiple of 32) quantized to `format` (kQ8, kQ4, kQ8A8 or kQ8C,
// kernels/quant_format.h) -> [ceil(N/16), K/32, quant_group_bytes(format)] of
// fma_linear_storage(format); kQ8C: [ceil(N/16), 4 + K, 16] uint8 (quant_format.h's block).
// Cost: one pass over W, split among threads by column blocks.
at::Tensor fma_linear_quantize(const at::Tensor& weight, WeightFormat format);

// The dtype of a packed quantized weight: uint8, and int8 for kQ8A8 (its records have kQ8's
// size; the dtype tells them apart).
at::ScalarType fma_linear_storage(WeightFormat format);
// The format of a packed weight (from its dtype, and for uint8 its last dimension).
WeightFormat fma_linear_format(const at::Tensor& packed);
// Input features K of a packed weight.
int64_t fma_linear_k(const at::Tensor& packed);

// x [M, K] (any float dtype; widened to fp32, exact for fp16/bf16), packed from
// fma_linear_pack() or fma_linear_quantize() of an [N, K] weight, bias [N] fp32 or undefined -> [M, N] in `out_dtype`:
// the fp32 result of kernels/fma_linear.h rounded to nearest even.
at::Tensor fma_linear(const at::Tensor& x, const at::Tensor& packed, int64_t n,
                      const at::Tensor& bias, CpuIsa path, at::ScalarType out_dtype);

}  // namespace pylookahead
