// Static KV cache for one sequence, allocated once: [L, 2, Hkv, capacity, D].
// Rows are sequence slots; which rows count as committed is the caller's business (the step
// model keeps kv_len). A step writes its rows into the scratch tail and the caller keeps only
// the accepted ones with move_row(); nothing is recomputed.
//
// On the CPU a bf16, fp16 or fp32 cache also keeps the copy the row-invariant attention kernel
// reads (model/attention.h), widened to fp32 and with the keys transposed, updated by write() and
// move_row() for the rows they touch: a decode step then widens its own T rows, not the whole
// cache in every layer.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
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
    // For CUDA caches, which keep no fp32 copy: the copy is not updated.
    void write_slots(int layer, const at::Tensor& slots, const at::Tensor& k, const at::Tensor& v);

    // [Hkv, capacity, D] views of all rows of `layer` (row stride D, head stride capacity * D).
    const at::Tensor& layer_keys(int layer) const { return keys_[layer]; }
    const at::Tensor& layer_values(int layer) const { return values_[layer]; }

    // Copies row `src` to row `dst` in every layer, keys and values.
    void move_row(int64_t src, int64_t dst);

    // Rows per block of the fp32 copy's keys (the attention kernel's vector lanes).
    static constexpr int64_t kWidenedBlock = 16;

    // One layer of the fp32 copy (null pointers where the cache keeps none: CUDA, fp64):
    //   keys_t  [Hkv, blocks, D, 16]     keys transposed in blocks of 16 rows (one [D, 16] tile
    //                                    of 4 * 16 * D bytes each): row r of head h, dim i at
    //                                    keys_t[((h * blocks + r / 16) * D + i) * 16 + r % 16],
    //                                    blocks = capacity rounded up to 16, over 16
    //   values  [Hkv, capacity, value_stride]   value_stride = D rounded up to 16, zero padded
    // Rows written so far hold the cache's values exactly; the other rows of their block are
    // finite (zero or an older row). Valid until the next write() or move_row().
    struct Widened {
        const float* keys_t = nullptr;
        const float* values = nullptr;
        int64_t value_stride = 0;
    };
    Widened widened(int layer) const;

  private:
    // Widens rows [start, start + t) of `layer` into the copy (after zeroing any 16-row block
    // met for the first time, so that a kernel reading whole blocks reads finite values).
    void widen_rows(int layer, int64_t start, int64_t t);

    int capacity_;
    at::Tensor data_;                 // [L, 2, Hkv, capacity, D]
    std::vector<at::Tensor> keys_;    // per layer, the [Hkv, capacity, D] view data_[l][0]
    std::vector<at::Tensor> values_;  // per layer, data_[l][1]
    // The fp32 copy (undefined when none): [L, Hkv, blocks, D, 16] and [L, Hkv, capacity,
    // value_stride] (undefined for fp32 caches whose rows are whole vectors: read in place),
    // allocated without touching their pages (at::empty), and per layer how many leading rows
    // (whole blocks) have been zeroed or written once.
    at::Tensor keys_t_;
    at::Tensor widened_values_;
    std::vector<int64_t> widened_rows_;
};

}  // namespace pylookahead
