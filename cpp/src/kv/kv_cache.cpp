#include "kv/kv_cache.h"

#include <cstring>

#include "check.h"

namespace pylookahead {

KvCache::KvCache(int num_layers, int num_kv_heads, int capacity, int head_dim, at::ScalarType dtype,
                 at::Device device)
    : capacity_(capacity) {
    data_ = at::zeros({num_layers, 2, num_kv_heads, capacity, head_dim},
                      at::TensorOptions().dtype(dtype).device(device));
    for (int l = 0; l < num_layers; ++l) {
        keys_.push_back(data_[l][0]);
        values_.push_back(data_[l][1]);
    }
}

namespace {

// src [T, Hkv, D] -> rows start .. start+T-1 of dst [Hkv, capacity, D].
void write_rows(const at::Tensor& dst, int64_t start, const at::Tensor& src) {
    PYLA_CHECK(src.dim() == 3 && src.size(1) == dst.size(0) && src.size(2) == dst.size(2),
               "KV write of " << src.sizes() << " into a cache of " << dst.sizes());
    const int64_t t = src.size(0), heads = src.size(1), d = src.size(2);
    if (dst.is_cpu() && src.is_cpu() && src.scalar_type() == dst.scalar_type() &&
        src.stride(2) == 1) {
        const int64_t es = src.element_size();
        const auto* s = static_cast<const char*>(src.const_data_ptr());
        auto* p = static_cast<char*>(dst.data_ptr());
        for (int64_t h = 0; h < heads; ++h) {
            for (int64_t r = 0; r < t; ++r) {
                std::memcpy(p + (h * dst.stride(0) + (start + r) * dst.stride(1)) * es,
                            s + (r * src.stride(0) + h * src.stride(1)) * es, d * es);
            }
        }
        return;
    }
    dst.narrow(1, start, t).copy_(src.transpose(0, 1));
}

}  // namespace

void KvCache::write(int layer, int64_t start, const at::Tensor& k, const at::Tensor& v) {
    const int64_t t = k.size(0);
    PYLA_CHECK(start >= 0 && start + t <= capacity_, "KV write of rows ["
                                                         << start << ", " << start + t
                                                         << ") past capacity " << capacity_);
    write_rows(keys_[layer], start, k);
    write_rows(values_[layer], start, v);
}

void KvCache::write_slots(int layer, const at::Tensor& slots, const at::Tensor& k,
                          const at::Tensor& v) {
    keys_[layer].index_copy_(1, slots, k.transpose(0, 1));
    values_[layer].index_copy_(1, slots, v.transpose(0, 1));
}

void KvCache::move_row(int64_t src, int64_t dst) {
    PYLA_CHECK(src >= 0 && src < capacity_ && dst >= 0 && dst < capacity_,
               "KV move_row " << src << " -> " << dst << " out of range");
    if (src == dst) return;
    data_.narrow(3, dst, 1).copy_(data_.narrow(3, src, 1));
}

}  // namespace pylookahead
