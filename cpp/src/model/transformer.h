// The model as a function: forward(tokens, positions, mask, kv) -> logits of selected rows.
// One block serves Llama, Qwen2 and Mistral: RMSNorm, RoPE, GQA attention, SwiGLU MLP.
// Knows nothing of lookahead. Weights are immutable after load, so one Transformer may be used
// by many threads, each with its own KvCache.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "kernels/fma_linear.h"
#include "kv/kv_cache.h"
#include "model/gguf_weights.h"
#include "model/lm_head_screen.h"

namespace pylookahead {

struct LayerWeights {
    at::Tensor input_norm;  // [hidden]
    at::Tensor qkv;         // [(H + 2 Hkv) D, hidden]  q, k, v projections fused
    at::Tensor qkv_bias;    // [(H + 2 Hkv) D] or undefined (fp32 with the engine's kernels)
    at::Tensor o;           // [hidden, H D]
    at::Tensor o_bias;      // [hidden] or undefined (likewise)
    at::Tensor post_norm;   // [hidden]
    at::Tensor gate_up;     // [2 I, hidden]  gate and up projections fused
    at::Tensor down;        // [hidden, I]
};

// The formats of the linear layers (kernels/quant_format.h, docs/design.md "Quantized
// weights"). kAuto: a GGUF file's Q8_0, Q5_0, Q4_0 and Q4_1 linear weights run as they are (int8,
// int4), its other types and every safetensors weight in dtype; kNone: all in dtype;
// kFormat: all in `format` (kQ8, kQ4 or kQ8A8): GGUF weights already in it as they are (kQ8A8
// takes Q8_0 and Q5_0 blocks), the others
// quantized at load. `lm_head` false keeps the lm_head in dtype. A tied lm_head gets its own
// copy (the embedding stays in dtype). Quantized weights run on the engine's kernels only
// (avx2, generic).
struct WeightQuantization {
    enum class Mode { kAuto, kNone, kFormat };
    Mode mode = Mode::kAuto;
    WeightFormat format = WeightFormat::kQ8;
    bool lm_head = true;
};

class Transformer {
  public:
    // Loads and validates every tensor of `path` (a checkpoint directory or a GGUF file) against
    // `config`, casting to `dtype` on `device`. Throws ModelLoadError naming the file and tensor
    // on a missing, unexpected or mis-shaped tensor.
    // Kernels of the linear layers (docs/design.md): kBf16Dot (bf16_linear.h, AVX512-BF16),
    // kAvx2 and kGeneric (kernels/fma_linear.h on its avx2 or generic path), kOneDnnPacked
    // (oneDNN's prepacked linear), kAten (at::linear).
    enum class LinearKernel { kAten, kOneDnnPacked, kBf16Dot, kAvx2, kGeneric };

    // `linear_kernel`: the kernel to use (ConfigError naming the kernel, the dtype and what the
    // CPU lacks if it cannot run here, or if it fails the probe); nullopt = the first of the
    // candidates for the dtype, in order of expected speed, that loads and passes the probe.
    using Quantization = WeightQuantization;

    // `path`: a checkpoint directory (config.json + safetensors) or a GGUF file.
    // `lm_head_screen`: take each step's argmax through an int8 screen of the lm_head where it
    // applies (lm_head_screen() below); the argmax is the same either way.
    Transformer(const std::string& path, ModelConfig config, at::ScalarType dtype,
                at::Device device, std::optional<LinearKernel> linear_kernel = std::nullopt,
                Quantization quantize = {}, bool lm_head_screen = true);

    const ModelConfig& config() const { return config_; }
    at::ScalarType dtype() const { return dtype_; }
    at::Device device() const { return device_; }

    // tokens    [T] int64, positions [T] int64 (absolute), on device()
    // mask      [T, kv_len + T] bool (true = may attend), or nullopt: causal over the step rows
    //           (row q sees all kv_len committed rows and step rows 0..q)
    // out_rows  [R] int64: rows whose logits are returned
    // row_invariant  true: attention through the row-invariant kernel (attention.h), with
    //           host_mask [T * T] (null = causal) telling which step rows each row sees, so that a
    //           row's result does not depend on the other rows of the step (decode steps);
    //           false: SDPA (prefill). On CUDA only the latter: decode steps there go through
    //           forward_rows (cuda/cuda_step.cpp).
    // Writes the step rows' K/V into kv rows kv_len .. kv_len+T-1.
    // Returns logits [R, V] in dtype().
    at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions,
                       const std::optional<at::Tensor>& mask, KvCache& kv, int64_t kv_len,
                       const at::Tensor& out_rows, bool row_invariant = false,
                       const uint8_t* host_mask = nullptr) const;
    // forward() in two halves: the final norm's rows [R, hidden] in dtype(), then their logits.
    at::Tensor forward_hidden(const at::Tensor& tokens, const at::Tensor& positions,
                              const std::optional<at::Tensor>& mask, KvCache& kv, int64_t kv_len,
                              const at::Tensor& out_rows, bool row_invariant = false,
                              const uint8_t* host_mask = nullptr) const;
    at::Tensor lm_head_logits(const at::Tensor& hidden) const;
    // Whether the lm_head screen is in use (model/lm_head_screen.h): CPU, the engine's avx2 or
    // generic kernel, an fp32 or bf16 lm_head that is not quantized, hidden_size a multiple of 32,
    // and asked for at construction.
    bool lm_head_screen() const { return screen_ != nullptr; }
    // The argmax of each row of lm_head_logits(hidden) (first index of the maximum, as
    // at::argmax over its fp32 values) for the rows with need[r]; for the others, the argmax of
    // the screen's approximations (LmHeadScreen::argmax). lm_head_screen() must be true.
    // `approx`: if not null, the screen's fp32 approximations of the logits [R, V].
    std::vector<TokenId> lm_head_argmax(const at::Tensor& hidden, const std::vector<bool>& need,
                                        at::Tensor* approx) const;

    // The attention of one layer in a step: stores the step rows' K/V and returns [T, H, D].
    // q [T, H, D] (RoPE applied, contiguous), k [T, Hkv, D] (RoPE applied), v [T, Hkv, D].
    using AttendFn = std::function<at::Tensor(int layer, const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v)>;
    // Logits [T, V] in dtype() of every row of a step whose K/V writes and attention `attend`
    // does: the decode step of a device runtime (cuda/cuda_step.h), where KV slots and visibility
    // live in device memory. Issues only device work (no host sync): CUDA-graph capturable.
    at::Tensor forward_rows(const at::Tensor& tokens, const at::Tensor& positions,
                            const AttendFn& attend) const;

    // How the linear layers run (see linear()).
    LinearKernel linear_kernel() const { return kernel_; }
    // The candidates `auto` passed over before linear_kernel(), each as "name: reason".
    const std::vector<std::string>& linear_kernel_skipped() const { return skipped_; }
    // Whether any linear weight is held quantized, and whether the lm_head is.
    bool quantized() const { return quantized_; }
    bool lm_head_quantized() const {
        return lm_head_.scalar_type() == at::kByte || lm_head_.scalar_type() == at::kChar;
    }
    // How the linear weights were taken, by source: e.g. "Q4_1: 150 as they are (int4)",
    // "Q6_K: 12 dequantized to float32", "checkpoint: 121 quantized to int8" (fused q/k/v and
    // gate/up count once; the lm_head too).
    const std::vector<std::string>& weight_notes() const { return weight_notes_; }
    // Bytes of every weight held (embedding, linear layers as packed, norms; a tied lm_head's
    // packed copy counted once; the lm_head screen's copy).
    int64_t weight_bytes() const;
    // True when the CPU linear weights are held pre-packed (oneDNN's or bf16_linear's layout).
    bool packed_weights() const { return kernel_ != LinearKernel::kAten; }
    // Fewest rows a decode step must run so that every row's result has the same bits as in a
    // step of any other size >= that: 1 with the engine's kernels (row-invariant by construction), 2 with
    // oneDNN-packed weights or bf16/fp16 (the GEMMs differ at M = 1), 4 for MKL fp32/fp64
    // (measured on the CPUs here; see docs/design.md).
    int min_invariant_rows() const;

  private:
    // y = x W^T (+ bias). bf16 on a CPU with AVX512-BF16: bf16_linear.h (weights packed at
    // load). Other CPU bf16 and fp32: oneDNN's linear on the weight reordered once at load,
    // instead of at::linear, which reorders a bf16 weight on every call (same bits for M >= 2
    // rows) and runs fp32 on MKL (other bits). `n` = output features (W's rows).
    at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                      int64_t n) const;
    // Chooses the kernel of linear() and packs every linear weight for it.
    void pack_weights(std::optional<LinearKernel> want);
    // One linear weight (`dense` in dtype; `parts` its GGUF tensors, empty for safetensors) in
    // the layout of `kernel`, as quantize_ asks; counts what it did in weight_notes_ when `note`.
    at::Tensor pack_linear(LinearKernel kernel, const at::Tensor& dense,
                           const std::vector<GgufPart>& parts, bool is_lm_head, bool note);
    // Why `kernel` cannot run for this model here ("" when it can): dtype, device, CPU features.
    std::string kernel_shortfall(LinearKernel kernel) const;
    // Probes `kernel` for row invariance on the first layer's qkv and, when it passes, packs every
    // weight for it. False on a failed probe (weights untouched); exceptions of the packing
    // (e.g. oneDNN refusing this CPU) propagate.
    bool try_kernel(LinearKernel kernel);
    // x [T, hidden] -> transformers' RMS norm of x times weight, [T, hidden] in dtype().
    at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) const;
    // x += delta (in place, x's dtype), then rms_norm(x, weight). x, delta [T, hidden].
    at::Tensor add_rms_norm(at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight) const;
    // q [R, H, D], keys/values [Hkv, S, D], mask [R, S] bool or nullopt -> [R, H, D]
    at::Tensor sdpa(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                    const std::optional<at::Tensor>& mask, bool is_causal) const;
    // The residual stream after the last layer: x + mlp_out, kept apart so that the final norm can
    // fuse the add (forward() over all rows) or take selected rows first.
    struct Residual {
        at::Tensor x, mlp_out;  // [T, hidden]
    };
    // Embedding, RoPE tables and every layer over `tokens` at `positions`; `attend` per layer.
    Residual run_layers(const at::Tensor& tokens, const at::Tensor& positions,
                        const AttendFn& attend) const;
    // x [T, heads, D]; cos, sin [T, 1, D] in dtype()
    static at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

    ModelConfig config_;
    at::ScalarType dtype_;
    at::Device device_;
    at::Tensor embed_;  // [V, hidden]
    std::vector<LayerWeights> layers_;
    at::Tensor final_norm_;  // [hidden]
    at::Tensor lm_head_;     // [V, hidden] (the embedding when tied)
    bool screen_wanted_ = true;
    std::shared_ptr<const LmHeadScreen> screen_;  // null: every step computes the whole lm_head
    at::Tensor inv_freq_;                         // [D / 2] fp32, rope scaling applied
    Quantization quantize_;
    bool quantized_ = false;
    std::vector<std::string> weight_notes_;
    // While packing: how many linear weights of each source took each action, in first-seen order.
    struct NoteCount {
        std::string source, action;
        int64_t count = 0;
    };
    std::vector<NoteCount> note_counts_;
    // During the constructor only: the GGUF tensors of each linear weight (qkv, o, gate_up, down
    // per layer, then the lm_head), pointing into the open file; empty for safetensors.
    std::vector<std::vector<GgufPart>> gguf_parts_;
    LinearKernel kernel_ = LinearKernel::kAten;  // and the layout of the linear weights
    std::vector<std::string> skipped_;
};

// Kernel names as EngineConfig::linear_kernel and ModelInfo::linear_kernel spell them.
const char* linear_kernel_name(Transformer::LinearKernel kernel);
// The kernel called `name`; nullopt when no kernel has that name.
std::optional<Transformer::LinearKernel> linear_kernel_from_name(const std::string& name);
// "bf16-avx512, avx2, onednn, generic, aten": every name, for error messages.
std::string linear_kernel_names();

}  // namespace pylookahead
