#include "kv/kv_cache.h"

#include "check.h"

namespace pylookahead {

KvCache::KvCache(int num_layers, int num_kv_heads, int capacity, int head_dim, at::ScalarType dtype,
                 at::Device device)
    : capacity_(capacity) {
    data_ = at::zeros({num_layers, 2, num_kv_heads, capacity, head_dim},
                      at::TensorOptions().dtype(dtype).device(device));
}

void KvCache::write(int layer, int64_t start, const at::Tensor& k, const at::Tensor& v) {
    const int64_t t = k.size(0);
    PYLA_CHECK(start >= 0 && start + t <= capacity_, "KV write of rows ["
                                                         << start << ", " << start + t
                                                         << ") past capacity " << capacity_);
    data_[layer][0].narrow(1, start, t).copy_(k.transpose(0, 1));
    data_[layer][1].narrow(1, start, t).copy_(v.transpose(0, 1));
}

void KvCache::move_row(int64_t src, int64_t dst) {
    PYLA_CHECK(src >= 0 && src < capacity_ && dst >= 0 && dst < capacity_,
               "KV move_row " << src << " -> " << dst << " out of range");
    if (src == dst) return;
    data_.narrow(3, dst, 1).copy_(data_.narrow(3, src, 1));
}

}  // namespace pylookahead
