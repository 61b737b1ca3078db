// DeviceStep on CUDA (runtime/device_step.h): fixed-row decode steps, inputs staged in one pinned
// buffer, attention through the row-invariant kernel (cuda/step_attention.h), the whole forward
// captured once as a CUDA graph and replayed.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "check.h"
#include "cuda/step_attention.h"
#include "pylookahead/errors.h"
#include "runtime/device_step.h"

namespace pylookahead {

namespace {

StepAttentionDType attention_dtype(at::ScalarType t) {
    switch (t) {
        case at::kFloat: return StepAttentionDType::kFloat32;
        case at::kBFloat16: return StepAttentionDType::kBFloat16;
        case at::kHalf: return StepAttentionDType::kFloat16;
        default:
            throw ConfigError(std::string("dtype ") + c10::toString(t) +
                              " has no CUDA decode step (float32, bfloat16, float16)");
    }
}

int64_t reserved_bytes(at::Device device) {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index())
        .reserved_bytes[0]  // aggregate over pools
        .current;
}

class CudaStep final : public DeviceStep {
  public:
    CudaStep(const Transformer& model, KvCache& kv, int rows, bool use_graphs)
        : model_(model), kv_(kv), rows_(rows), use_graphs_(use_graphs) {
        const ModelConfig& c = model.config();
        attn_.rows = rows;
        attn_.heads = c.num_attention_heads;
        attn_.kv_heads = c.num_key_value_heads;
        attn_.head_dim = c.head_dim;
        attn_.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
        attn_.dtype = attention_dtype(model.dtype());
        if (step_attention_shared_bytes(c.num_attention_heads, c.num_key_value_heads, c.head_dim) >
            48 * 1024) {
            throw ConfigError(
                "the CUDA decode step supports num_attention_heads / "
                "num_key_value_heads * head_dim up to about 5000 (got " +
                std::to_string(c.num_attention_heads / c.num_key_value_heads) + " * " +
                std::to_string(c.head_dim) + ")");
        }
        const int64_t n = 3 * int64_t{rows} + 1 + int64_t{rows} * rows;
        c10::cuda::CUDAGuard guard(model.device());
        host_ = at::zeros({n}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
        dev_ = at::zeros({n}, at::TensorOptions().dtype(at::kInt).device(model.device()));
        ids_host_ = at::empty({rows}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
        arange_ = at::arange(rows, at::TensorOptions().dtype(at::kLong).device(model.device()));
    }

    at::Tensor run(const std::vector<TokenId>& tokens, const std::vector<int32_t>& positions,
                   const uint8_t* mask, int kv_len, std::vector<TokenId>* argmax_all) override {
        const int t = static_cast<int>(tokens.size()), m = rows_;
        PYLA_CHECK(t >= 1 && t <= m && positions.size() == tokens.size(),
                   "CUDA step of " << t << " tokens, " << positions.size() << " positions, " << m
                                   << " rows");
        PYLA_CHECK(kv_len >= 0 && int64_t{kv_len} + m <= kv_.capacity(),
                   "CUDA step of " << m << " rows at kv_len " << kv_len << " overruns KV capacity "
                                   << kv_.capacity());
        c10::cuda::CUDAGuard guard(model_.device());
        int32_t* h = host_.data_ptr<int32_t>();
        for (int r = 0; r < m; ++r) {  // padding rows repeat row 0
            h[r] = tokens[r < t ? r : 0];
            h[m + r] = positions[r < t ? r : 0];
        }
        h[2 * m] = kv_len;
        const bool table_changed = set_visibility(mask, t);
        // The inputs, and the visibility table after them when it changed: one copy.
        const int64_t n = table_changed ? host_.numel() : 2 * int64_t{m} + 1;
        dev_.narrow(0, 0, n).copy_(host_.narrow(0, 0, n), /*non_blocking=*/true);
        if (use_graphs_) {
            if (!graph_) capture();
            graph_->replay();
        } else {
            logits_ = forward();
        }
        ids_host_.copy_(ids_, /*non_blocking=*/true);
        // The next run rewrites host_ and reads ids_host_: both copies must be done.
        c10::cuda::getCurrentCUDAStream().synchronize();
        const int32_t* ids = ids_host_.data_ptr<int32_t>();
        argmax_all->assign(ids, ids + m);
        return logits_;
    }

    int rows() const override { return rows_; }
    int graphs() const override { return graph_ ? 1 : 0; }
    int64_t graph_bytes() const override { return graph_bytes_; }

  private:
    // Fills the host visibility table (nvisible [M], visible [M, M]) from `mask` [t * t] (null =
    // causal); padding rows see themselves. Returns whether it differs from the last step's.
    bool set_visibility(const uint8_t* mask, int t) {
        const size_t n = static_cast<size_t>(t) * t;
        std::vector<uint8_t> key(n + 1);
        key[0] = static_cast<uint8_t>(mask == nullptr);
        if (mask != nullptr) std::memcpy(key.data() + 1, mask, n);
        if (have_table_ && key == table_key_ && t == table_rows_) return false;
        const int m = rows_;
        int32_t* nvis = host_.data_ptr<int32_t>() + 2 * m + 1;
        int32_t* vis = nvis + m;
        for (int r = 0; r < m; ++r) {
            int count = 0;
            if (r < t) {
                for (int c = 0; c < t; ++c) {
                    const bool sees = mask != nullptr ? mask[r * t + c] != 0 : c <= r;
                    if (sees) vis[r * m + count++] = c;
                }
            } else {
                vis[r * m + count++] = r;
            }
            PYLA_CHECK(count >= 1, "step row " << r << " sees no step row");
            nvis[r] = count;
        }
        table_key_ = std::move(key);
        table_rows_ = t;
        have_table_ = true;
        return true;
    }

    // The device work of one step, from dev_ to logits_ / ids_: what the graph captures.
    at::Tensor forward() {
        const int64_t m = rows_;
        const at::Tensor tokens = dev_.narrow(0, 0, m), positions = dev_.narrow(0, m, m);
        const at::Tensor kv_len = dev_.narrow(0, 2 * m, 1);
        const at::Tensor slots = arange_ + kv_len.to(at::kLong);
        StepAttentionArgs a = attn_;
        a.kv_len = kv_len.data_ptr<int32_t>();
        a.nvisible = dev_.data_ptr<int32_t>() + 2 * m + 1;
        a.visible = a.nvisible + m;
        auto attend = [&](int layer, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v) {
            kv_.write_slots(layer, slots, k, v);
            const at::Tensor& keys = kv_.layer_keys(layer);
            at::Tensor out = at::empty(q.sizes(), q.options());
            a.q = q.data_ptr();
            a.keys = keys.data_ptr();
            a.values = kv_.layer_values(layer).data_ptr();
            a.kv_head_stride = keys.stride(0);
            a.out = out.data_ptr();
            launch_step_attention(a, c10::cuda::getCurrentCUDAStream().stream());
            return out;
        };
        at::Tensor logits = model_.forward_rows(tokens, positions, attend).to(at::kFloat);
        ids_ = logits.argmax(-1).to(at::kInt);
        return logits;
    }

    // One eager warm-up step (cuBLAS handles and workspaces, allocator blocks; it writes only
    // scratch K/V rows), then the capture, both on a side stream as CUDA graphs require. Thread-
    // local capture mode: sessions in other threads may keep working meanwhile.
    void capture() {
        const at::Device device = model_.device();
        c10::cuda::getCurrentCUDAStream().synchronize();  // the inputs are on the device
        const int64_t before = reserved_bytes(device);
        c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device.index());
        {
            c10::cuda::CUDAStreamGuard on_side(side);
            forward();
            side.synchronize();
            auto graph = std::make_unique<at::cuda::CUDAGraph>();
            graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
            try {
                logits_ = forward();
            } catch (...) {
                try {
                    graph->capture_end();
                } catch (...) {
                }
                throw;
            }
            graph->capture_end();
            graph_ = std::move(graph);
        }
        graph_bytes_ = std::max<int64_t>(0, reserved_bytes(device) - before);
    }

    const Transformer& model_;
    KvCache& kv_;
    const int rows_;
    const bool use_graphs_;
    StepAttentionArgs attn_;  // shapes, scale, dtype; pointers filled per layer
    // int32 [3M + 1 + M*M]: tokens [M], positions [M], kv_len [1], nvisible [M], visible [M, M].
    at::Tensor host_;                 // pinned
    at::Tensor dev_;                  // its device copy, read by the graph
    at::Tensor arange_;               // [M] int64: 0 .. M-1 (slots = kv_len + arange)
    at::Tensor ids_host_;             // pinned int32 [M]
    std::vector<uint8_t> table_key_;  // the mask the visibility table was built from
    int table_rows_ = 0;
    bool have_table_ = false;
    std::unique_ptr<at::cuda::CUDAGraph> graph_;
    int64_t graph_bytes_ = 0;
    at::Tensor logits_, ids_;  // the step's outputs (in the graph's pool once captured)
};

}  // namespace

std::unique_ptr<DeviceStep> make_cuda_step(const Transformer& model, KvCache& kv, int rows,
                                           bool use_graphs) {
    return std::make_unique<CudaStep>(model, kv, rows, use_graphs);
}

}  // namespace pylookahead
