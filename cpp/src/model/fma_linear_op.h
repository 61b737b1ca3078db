// ATen side of the row-invariant fp32-accumulating linear kernel (kernels/fma_linear.h): packing
// at load and the per-step call, split over threads by column blocks.
#pragma once

#include <ATen/ATen.h>

#include "kernels/cpu_isa.h"

namespace pylookahead {

// W [N, K] fp32, fp16 or bf16 -> [ceil(N/8), K, 8] in W's dtype (fp32 for fp16 on a path that
// cannot read fp16), rows past N zero.
at::Tensor fma_linear_pack(const at::Tensor& weight, CpuIsa path);

// x [M, K] (any float dtype; widened to fp32, exact for fp16/bf16), packed from
// fma_linear_pack() of an [N, K] weight, bias [N] fp32 or undefined -> [M, N] in `out_dtype`:
// the fp32 result of kernels/fma_linear.h rounded to nearest even.
at::Tensor fma_linear(const at::Tensor& x, const at::Tensor& packed, int64_t n,
                      const at::Tensor& bias, CpuIsa path, at::ScalarType out_dtype);

}  // namespace pylookahead
