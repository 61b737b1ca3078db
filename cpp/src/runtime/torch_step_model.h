// StepModel over the libtorch Transformer and a static KvCache: turns the plain arrays of a step
// into device tensors, runs the model, and copies back only the argmax ids (int32, [R]); when
// sampling, the fp32 logits of the R wanted rows instead.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "kv/kv_cache.h"
#include "lookahead/decode_loop.h"
#include "lookahead/thread_governor.h"
#include "model/transformer.h"
#include "runtime/device_step.h"

namespace pylookahead {

// How decode steps run on an accelerator (ignored on the CPU).
struct DeviceStepOptions {
    int rows = 64;  // rows of every decode step (real rows padded; SessionConfig::cuda_step_rows)
    bool use_graphs = true;  // replay each step from a CUDA graph (EngineConfig::use_cuda_graphs)
};

class TorchStepModel : public StepModel {
  public:
    // Allocates the KV cache ([L, 2, Hkv, capacity + scratch rows, D]) once. `model` must outlive
    // this. On CUDA every decode step runs `device.rows` rows through a DeviceStep.
    TorchStepModel(const Transformer& model, int capacity, const DeviceStepOptions& device = {});

    // Decode steps on the CPU run with the thread count the ThreadGovernor picks (the calling
    // thread's OpenMP count or 1; the thread's own setting is restored after each step).
    void forward_step(const std::vector<TokenId>& tokens, const std::vector<int32_t>& positions,
                      const uint8_t* mask, const std::vector<int32_t>& out_rows,
                      const std::vector<int32_t>& exact_rows,
                      const std::vector<int32_t>& out_parent, std::vector<TokenId>* argmax,
                      TokenSampler* sampler) override;
    // false: every step runs on the calling thread's own count (while calibrating step costs).
    void set_govern_threads(bool on) { govern_threads_ = on; }
    bool govern_threads() const { return govern_threads_; }
    const ThreadGovernor& thread_governor() const { return governor_; }
    void commit(const std::vector<int32_t>& src_rows) override;
    int kv_len() const override { return kv_len_; }
    int kv_capacity() const override { return kv_.capacity() - (scratch_rows_ - 1); }
    // Most tokens a decode step may hold: the fixed rows of a device step; 0 = no limit (CPU).
    int max_step_rows() const { return device_step_ ? device_step_->rows() : 0; }
    // CUDA graphs held and the memory their pools reserved (0, 0 on the CPU or without graphs).
    int device_graphs() const { return device_step_ ? device_step_->graphs() : 0; }
    int64_t device_graph_bytes() const { return device_step_ ? device_step_->graph_bytes() : 0; }
    void truncate(int rows) override;
    // CUDA keeps fixed step shapes (graph replay); the CPU runs only a step's real rows.
    bool prefers_fixed_shapes() const override { return model_.device().is_cuda(); }
    // at::topk of each out row's fp32 logits, copied to the host with the argmax.
    int set_successors(int k) override {
        successors_k_ = k;
        if (k == 0) successors_.clear();
        return k;
    }
    const std::vector<TokenId>& successors() const override { return successors_; }

    // Logits [T, V] (fp32, host) of `tokens` run as a prefill from an empty cache; for tests.
    at::Tensor prefill_logits(const std::vector<TokenId>& tokens);

  private:
    // A decode step through device_step_: argmax or device-side sampling of the out rows.
    void run_device_step(const std::vector<TokenId>& tokens, const std::vector<int32_t>& positions,
                         const uint8_t* mask, const std::vector<int32_t>& out_rows,
                         std::vector<TokenId>* argmax, TokenSampler* sampler);
    void run_step(const std::vector<TokenId>& tokens, const std::vector<int32_t>& positions,
                  const uint8_t* mask, const std::vector<int32_t>& out_rows,
                  const std::vector<int32_t>& exact_rows, const std::vector<int32_t>& out_parent,
                  std::vector<TokenId>* argmax, TokenSampler* sampler);
    // The greedy choices of the out rows that are read (out_parent: lookahead/row_reads.h), in
    // two lm_head passes; -1 for the others. hidden [R, hidden] (final norm applied); need [R]:
    // the exact rows (the screen's rule). Each row's choice is the one a pass over all rows
    // gives: the lm_head kernel is row-invariant (min_decode_rows_ == 1). Not with successors.
    void choose_read_rows(const at::Tensor& hidden, const std::vector<bool>& need,
                          const std::vector<TokenId>& row_token,
                          const std::vector<int32_t>& out_parent, std::vector<TokenId>* argmax);
    // Successors (set_successors): the top k of each row of scores ([R, V] fp32), and from them
    // the exact argmax of each row, without a second pass over the vocabulary.
    void top_k_rows(const at::Tensor& scores, int rows, std::vector<TokenId>* argmax);
    // Stages a step's (or a prefill's) ids, positions and out rows in the preallocated input
    // buffers (grown only for a longer one, e.g. a long prompt) and returns device views.
    struct StepInputs {
        at::Tensor tokens, positions, out_rows;  // int64 [T], [T], [R] on the model's device
    };
    StepInputs stage_inputs(const std::vector<TokenId>& tokens,
                            const std::vector<int32_t>& positions,
                            const std::vector<int32_t>& out_rows);

    const Transformer& model_;
    // Decode steps run at least this many rows (padding rows are computed and thrown away): the
    // CPU GEMMs give a row the same bits for every M >= 2 (oneDNN: bf16, or packed fp32) or
    // M >= 4 (MKL fp32/fp64), but not for M = 1, so a one-token greedy step would round
    // differently from the same token inside a lookahead step (Transformer::min_invariant_rows).
    int min_decode_rows_;
    // Cache rows past kv_capacity() that a step may write: min_decode_rows_ - 1 (CPU padding), or
    // the device step's rows - 1.
    int scratch_rows_;
    KvCache kv_;
    std::unique_ptr<DeviceStep> device_step_;  // CUDA decode steps; null on the CPU
    int kv_len_ = 0;
    int pending_rows_ = 0;  // step rows written by the last forward_step
    // [3, cap] int64: row 0 token ids, row 1 positions, row 2 out rows of the current step.
    // Host side pinned on CUDA; on the CPU both are the same tensor. Decode steps reuse them
    // (no per-step allocation; fixed addresses for a step of fixed shape).
    at::Tensor host_inputs_;
    at::Tensor device_inputs_;
    std::vector<uint8_t> mask_key_;  // [T * T] the step mask last turned into mask_block_
    at::Tensor mask_block_;          // [T, T] bool on device
    ThreadGovernor governor_;        // kept across generations (what it learned holds)
    bool govern_threads_ = true;
    int successors_k_ = 0;
    std::vector<TokenId> successors_;  // [R * k] of the last decode step
    std::vector<TokenId> row_token_;   // choose_read_rows scratch: [R] tokens of the out rows
    std::vector<int32_t> pass_rows_;   // and the rows of one lm_head pass
};

}  // namespace pylookahead
