// Row-invariant attention for the rows whose results decoding keeps.
//
// Why: exactness. A lookahead step computes the input token and the verification candidates
// inside a batch of T rows; plain greedy computes the same tokens one row at a time. Library
// attention kernels (SDPA) block the work by query length and key length, so the same row can
// round differently in the two cases, and in bfloat16 such differences flip near-tied argmaxes.
// Here each (row, head) is computed on its own from its query and exactly the K/V rows it may
// see, taken in slot order, in fp32 (fp64 for fp64) with a fixed reduction order. The result of
// a row therefore depends only on its own inputs: bitwise the same whatever else is in the step.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "kv/kv_cache.h"

namespace pylookahead {

// q       [T, H, D]        queries of the step (rope applied), dtype of the model
// kv      a CPU cache; `layer`'s rows 0 .. kv_len + T - 1 written (read through its fp32 copy,
//         KvCache::widened(), or as they are for fp64)
// kv_len                   committed rows: every query row sees cache rows 0 .. kv_len-1
// mask    [T * T] or null  step-row visibility (row-major, nonzero = visible); null = causal
// rows    [R]              the query rows to compute (ascending)
// out     [T, H, D]        rows listed in `rows` are overwritten; others untouched
// Step row j lives in cache row kv_len + j. Cost: O(rows x (kv_len + T) x H x D); nothing
// proportional to the cache is converted per call.
void attention_rows(const at::Tensor& q, const KvCache& kv, int layer, int64_t kv_len,
                    const uint8_t* mask, const std::vector<int32_t>& rows, double scale,
                    at::Tensor& out);

}  // namespace pylookahead
