// A decode step on an accelerator: every step runs the same number of rows (the real rows, then
// padding rows that see only themselves), so that every kernel sees one shape -- the condition
// under which a row's result is the same bits in every step (docs/design.md, "CUDA") -- and one
// CUDA graph, captured on the first step, serves every later step. The interface needs no CUDA
// header; cuda/cuda_step.cpp implements it where torch has CUDA.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_cache.h"
#include "model/transformer.h"
#include "pylookahead/types.h"

namespace pylookahead {

class DeviceStep {
  public:
    virtual ~DeviceStep() = default;

    // tokens, positions [T], 1 <= T <= rows(); mask [T * T] (as StepModel::forward_step) or null
    // (causal); kv_len committed cache rows, kv_len + rows() <= the cache's capacity.
    // Writes the K/V of all rows() rows into cache rows kv_len .. kv_len + rows() - 1 (rows past T
    // are scratch). argmax_all: out, the argmax of each of the rows() rows (host, [rows()]).
    // Returns the logits [rows(), V] fp32 on the device, valid until the next run().
    // Cost per call: one host-to-device copy of the inputs (the visibility table only when the
    // mask changed), the forward pass (one graph replay), one device-to-host copy of rows() int32.
    virtual at::Tensor run(const std::vector<TokenId>& tokens,
                           const std::vector<int32_t>& positions, const uint8_t* mask, int kv_len,
                           std::vector<TokenId>* argmax_all) = 0;
    virtual int rows() const = 0;
    // CUDA graphs held (0 or 1: one step shape per session), and the device memory their private
    // pool reserved when captured.
    virtual int graphs() const = 0;
    virtual int64_t graph_bytes() const = 0;
};

// A DeviceStep on `model`'s CUDA device over `kv` (both must outlive it), `rows` rows a step,
// replayed from a CUDA graph when `use_graphs`. Throws ConfigError when this build has no CUDA
// support.
std::unique_ptr<DeviceStep> make_cuda_step(const Transformer& model, KvCache& kv, int rows,
                                           bool use_graphs);

}  // namespace pylookahead
