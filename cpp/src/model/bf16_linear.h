// bfloat16 linear layers on CPUs with AVX512-BF16: y = x W^T (+ bias), fp32 accumulation.
//
// Why: decode steps have few rows (1 for greedy, 4-16 for lookahead), where a linear layer is a
// stream over its weights. This kernel streams each weight once for up to 8 rows (more rows
// re-read it from cache) and needs no padding row: on the CPUs here a 1-token step of
// Qwen2.5-Coder-0.5B took 23.9 ms against 26.3 ms with oneDNN's prepacked linear, and 8 tokens
// 1.10x its 1-token step against oneDNN's 1.14x (benchmarks/linear_kernels.py).
//
// Exactness: every output element is computed by one fixed sequence (an fp32 accumulator, one
// VDPBF16PS per pair of k, k ascending), whatever the number of rows or threads, so a row's
// result does not depend on the other rows of the step: the same bits at 1 row as at 100.
#pragma once

#include <ATen/ATen.h>

namespace pylookahead {

// True when the kernel may run: cpu_isa() (the CPU's level under any PYLOOKAHEAD_CPU_ISA cap)
// has AVX512F, AVX512BW, AVX512VL and AVX512-BF16.
bool bf16_linear_supported();

// W [N, K] -> packed weight for bf16_linear(): [ceil(N/16), K/2, 16, 2] bf16 (output rows padded
// with zeros to a multiple of 16). Requires an even K.
at::Tensor bf16_linear_pack(const at::Tensor& weight);

// x [M, K] bf16 (rows contiguous), packed from bf16_linear_pack() of an [N, K] weight, bias [N]
// (fp32 best, bf16 converted per call, or undefined) -> [M, N] bf16: round-to-nearest-even of (x W^T + bias) computed in fp32.
at::Tensor bf16_linear(const at::Tensor& x, const at::Tensor& packed, int64_t n,
                       const at::Tensor& bias);

}  // namespace pylookahead
