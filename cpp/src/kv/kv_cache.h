// Static KV cache for one sequence, allocated once: [L, 2, Hkv, capacity, D].
// Rows are sequence slots; which rows count as committed is the caller's business (the step
// model keeps kv_len). A step writes its rows into the scratch tail and the caller keeps only
// the accepted ones with move_row(); nothing is recomputed.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace pylookahead {

class KvCache {
  public:
    KvCache(int num_layers, int num_kv_heads, int capacity, int head_dim, at::ScalarType dtype,
            at::Device device);

    int capacity() const { return capacity_; }

    // [Hkv, len, D] views of rows 0..len-1 of `layer`.
    at::Tensor keys(int layer, int64_t len) const { return keys_[layer].narrow(1, 0, len); }
    at::Tensor values(int layer, int64_t len) const { return values_[layer].narrow(1, 0, len); }

    // Writes k, v [T, Hkv, D] into rows start .. start+T-1 of `layer`. On the CPU, with the
    // cache's dtype and contiguous rows of D, by one memcpy per (row, head): no ATen operator.
    void write(int layer, int64_t start, const at::Tensor& k, const at::Tensor& v);

    // Writes k, v [T, Hkv, D] into rows slots[0..T) of `layer`; slots [T] int64 on the cache's
    // device. Device work only (no host sync): CUDA-graph capturable. Slots must be < capacity.
    void write_slots(int layer, const at::Tensor& slots, const at::Tensor& k, const at::Tensor& v);

    // [Hkv, capacity, D] views of all rows of `layer` (row stride D, head stride capacity * D).
    const at::Tensor& layer_keys(int layer) const { return keys_[layer]; }
    const at::Tensor& layer_values(int layer) const { return values_[layer]; }

    // Copies row `src` to row `dst` in every layer, keys and values.
    void move_row(int64_t src, int64_t dst);

  private:
    int capacity_;
    at::Tensor data_;                 // [L, 2, Hkv, capacity, D]
    std::vector<at::Tensor> keys_;    // per layer, the [Hkv, capacity, D] view data_[l][0]
    std::vector<at::Tensor> values_;  // per layer, data_[l][1]
};

}  // namespace pylookahead
