// TokenSampler's draw (lookahead/sampler.h) for a batch of rows in ATen operations on the logits'
// device, so that sampling on a GPU copies R token ids to the host instead of R x V logits.
// The rule is TokenSampler's: temperature, then top-k, then top-p (descending weight, ties to the
// lower id), weights exp((logit - max) / temperature) in double, the first token whose running
// sum exceeds u * total, u = uniform_at(seed, position). Sums run as ATen's cumsum, so on a GPU the
// last bits of a running sum may differ from TokenSampler's sequential ones; a row's draw is still
// a function of its logits and u alone for a fixed [R, V] shape, which is what keeps sampled
// lookahead equal to plain sampling (every decode step samples the same R rows).
#pragma once

#include <ATen/ATen.h>

namespace pylookahead {

// logits [R, V] fp32; uniforms [R] fp64 on the same device; temperature > 0, top_k >= 0 (0 = off),
// top_p in (0, 1] (1 = off). Returns [R] int64 token ids on that device (0 for an all-NaN row).
at::Tensor sample_rows(const at::Tensor& logits, const at::Tensor& uniforms, double temperature,
                       int top_k, double top_p);

}  // namespace pylookahead
