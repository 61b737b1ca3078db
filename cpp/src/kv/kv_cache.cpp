#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "check.h"
#include "kernels/bf16.h"

namespace pylookahead {

namespace {

constexpr int64_t kBlock = KvCache::kWidenedBlock;

int64_t round_up_block(int64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

}  // namespace

KvCache::KvCache(int num_layers, int num_kv_heads, int capacity, int head_dim, at::ScalarType dtype,
                 at::Device device)
    : capacity_(capacity) {
    data_ = at::zeros({num_layers, 2, num_kv_heads, capacity, head_dim},
                      at::TensorOptions().dtype(dtype).device(device));
    for (int l = 0; l < num_layers; ++l) {
        keys_.push_back(data_[l][0]);
        values_.push_back(data_[l][1]);
    }
    const bool widened =
        device.is_cpu() && (dtype == at::kBFloat16 || dtype == at::kHalf || dtype == at::kFloat);
    if (widened) {
        const auto f32 = at::TensorOptions().dtype(at::kFloat);
        keys_t_ = at::empty(
            {num_layers, num_kv_heads, round_up_block(capacity) / kBlock, head_dim, kBlock}, f32);
        if (dtype != at::kFloat || head_dim % kBlock != 0) {
            widened_values_ =
                at::empty({num_layers, num_kv_heads, capacity, round_up_block(head_dim)}, f32);
        }
        widened_rows_.assign(num_layers, 0);
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

// dtype -> fp32, exact for each dtype here (bf16 is the top half of an fp32).
template <typename T>
inline float widen(T x) {
    return static_cast<float>(x);
}
template <>
inline float widen(at::BFloat16 x) {
    return bf16_bits_to_float(x.x);
}

// Rows [start, start + t) of one layer's cache [Hkv, capacity, D] into its fp32 copy.
template <typename T>
void widen_layer_rows(const at::Tensor& keys, const at::Tensor& values, int64_t start, int64_t t,
                      float* keys_t, float* widened_values, int64_t value_stride) {
    const int64_t heads = keys.size(0), cap = keys.size(1), d = keys.size(2);
    const int64_t head_floats = round_up_block(cap) * d;  // one head's [blocks, D, 16]
    const T* kp = keys.const_data_ptr<T>();
    const T* vp = values.const_data_ptr<T>();
    for (int64_t h = 0; h < heads; ++h) {
        for (int64_t r = start; r < start + t; ++r) {
            const T* ks = kp + (h * cap + r) * d;
            float* kt = keys_t + h * head_floats + (r / kBlock) * d * kBlock + r % kBlock;
            for (int64_t i = 0; i < d; ++i) kt[i * kBlock] = widen(ks[i]);
            if (widened_values == nullptr) continue;
            const T* vs = vp + (h * cap + r) * d;
            float* vw = widened_values + (h * cap + r) * value_stride;
            for (int64_t i = 0; i < d; ++i) vw[i] = widen(vs[i]);
        }
    }
}

}  // namespace

void KvCache::write(int layer, int64_t start, const at::Tensor& k, const at::Tensor& v) {
    const int64_t t = k.size(0);
    PYLA_CHECK(start >= 0 && start + t <= capacity_, "KV write of rows ["
                                                         << start << ", " << start + t
                                                         << ") past capacity " << capacity_);
    write_rows(keys_[layer], start, k);
    write_rows(values_[layer], start, v);
    widen_rows(layer, start, t);
}

KvCache::Widened KvCache::widened(int layer) const {
    Widened w;
    if (!keys_t_.defined()) return w;
    w.keys_t = keys_t_.const_data_ptr<float>() + layer * keys_t_.stride(0);
    if (widened_values_.defined()) {
        w.values = widened_values_.const_data_ptr<float>() + layer * widened_values_.stride(0);
        w.value_stride = widened_values_.size(3);
    } else {
        w.values = values_[layer].const_data_ptr<float>();
        w.value_stride = values_[layer].size(2);
    }
    return w;
}

void KvCache::widen_rows(int layer, int64_t start, int64_t t) {
    if (!keys_t_.defined() || t <= 0) return;
    const int64_t heads = keys_t_.size(1), d = keys_t_.size(3);
    const int64_t rows_cap = keys_t_.size(2) * kBlock;  // capacity rounded up to a block
    float* kt = keys_t_.data_ptr<float>() + layer * keys_t_.stride(0);
    float* vw = widened_values_.defined()
                    ? widened_values_.data_ptr<float>() + layer * widened_values_.stride(0)
                    : nullptr;
    const int64_t value_stride = vw ? widened_values_.size(3) : 0;
    // First use of a block: zero it (pages of the copy are touched only as the cache fills).
    int64_t& ready = widened_rows_[layer];
    const int64_t end = round_up_block(start + t);
    if (end > ready) {
        for (int64_t h = 0; h < heads; ++h) {
            std::fill(kt + (h * rows_cap + ready) * d, kt + (h * rows_cap + end) * d, 0.f);
            if (vw) {
                const int64_t rows_end = std::min<int64_t>(end, capacity_);
                std::fill(vw + (h * capacity_ + ready) * value_stride,
                          vw + (h * capacity_ + rows_end) * value_stride, 0.f);
            }
        }
        ready = end;
    }
    const at::Tensor& keys = keys_[layer];
    const at::Tensor& values = values_[layer];
    switch (keys.scalar_type()) {
        case at::kBFloat16:
            widen_layer_rows<at::BFloat16>(keys, values, start, t, kt, vw, value_stride);
            break;
        case at::kHalf:
            widen_layer_rows<at::Half>(keys, values, start, t, kt, vw, value_stride);
            break;
        default: widen_layer_rows<float>(keys, values, start, t, kt, vw, value_stride); break;
    }
}

void KvCache::write_slots(int layer, const at::Tensor& slots, const at::Tensor& k,
                          const at::Tensor& v) {
    PYLA_CHECK(!keys_t_.defined(), "KV write_slots on a cache with an fp32 copy (CPU)");
    keys_[layer].index_copy_(1, slots, k.transpose(0, 1));
    values_[layer].index_copy_(1, slots, v.transpose(0, 1));
}

void KvCache::move_row(int64_t src, int64_t dst) {
    PYLA_CHECK(src >= 0 && src < capacity_ && dst >= 0 && dst < capacity_,
               "KV move_row " << src << " -> " << dst << " out of range");
    if (src == dst) return;
    data_.narrow(3, dst, 1).copy_(data_.narrow(3, src, 1));
    for (int l = 0; l < static_cast<int>(keys_.size()); ++l) widen_rows(l, dst, 1);
}

}  // namespace pylookahead
