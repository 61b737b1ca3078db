#include "model/transformer.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <string>

#include "check.h"
#include "io/gguf.h"
#include "io/gguf_config.h"
#include "io/safetensors.h"
#include "kernels/cpu_isa.h"
#include "kernels/quant_format.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "model/attention.h"
#include "model/bf16_linear.h"
#include "model/fma_linear_op.h"
#include "pylookahead/errors.h"
#if PYLA_WITH_CUDA
#include "cuda/fused_ops.h"
#endif

namespace pylookahead {

namespace {

at::ScalarType to_torch(StoredDType d) {
    switch (d) {
        case StoredDType::kF32: return at::kFloat;
        case StoredDType::kF16: return at::kHalf;
        case StoredDType::kBF16: return at::kBFloat16;
        case StoredDType::kF64: return at::kDouble;
    }
    return at::kFloat;
}

std::string shape_str(at::IntArrayRef s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

// Reads tensors by Hugging Face name from a safetensors checkpoint or a GGUF file, checks their
// shapes, and records which ones were used so that leftovers can be reported as unexpected.
class WeightReader {
  public:
    WeightReader(const std::string& path, const ModelConfig& config, at::ScalarType dtype,
                 at::Device device)
        : config_(config), dtype_(dtype), device_(device) {
        if (is_gguf_checkpoint(path)) {
            gguf_.emplace(path);
        } else {
            st_.emplace(path);
        }
    }

    bool contains(const std::string& name) const {
        return gguf_ ? gguf_->find(gguf_tensor_name(name)) != nullptr : st_->contains(name);
    }

    // The tensor in dtype on the device.
    at::Tensor get(const std::string& name, std::vector<int64_t> shape) {
        if (gguf_)
            return gguf_dense(part(name, shape))
                .to(at::TensorOptions().dtype(dtype_).device(device_));
        const TensorInfo& info = st_->get(name);
        check_shape(info.file, name, info.shape, shape);
        used_.insert(name);
        // The mmap goes away after loading: from_blob + to() always copies (clone when same dtype).
        at::Tensor src = at::from_blob(const_cast<unsigned char*>(info.data), info.shape,
                                       at::TensorOptions().dtype(to_torch(info.dtype)));
        return src.to(at::TensorOptions().dtype(dtype_).device(device_), false, true);
    }

    // The GGUF tensor of `name` as a part of a linear weight (shape checked); nullopt for
    // safetensors.
    std::optional<GgufPart> gguf_part(const std::string& name, std::vector<int64_t> shape) {
        if (!gguf_) return std::nullopt;
        return part(name, shape);
    }

    void check_all_used() const {
        if (gguf_) {
            for (const auto& [name, t] : gguf_->tensors()) {
                if (used_.count(name) == 0) {
                    throw ModelLoadError(gguf_->path() + ": unexpected tensor '" + name +
                                         "' (not part of this architecture)");
                }
            }
            return;
        }
        for (const auto& kv : st_->tensors()) {
            if (used_.count(kv.first) == 0 &&
                kv.first.find("rotary_emb.inv_freq") == std::string::npos) {
                throw ModelLoadError(kv.second.file + ": unexpected tensor '" + kv.first +
                                     "' (not part of this architecture)");
            }
        }
    }

  private:
    static void check_shape(const std::string& file, const std::string& name,
                            const std::vector<int64_t>& got, const std::vector<int64_t>& want) {
        if (got != want) {
            throw ModelLoadError(file + ": tensor '" + name + "' has shape " + shape_str(got) +
                                 ", expected " + shape_str(want) + " from the config");
        }
    }

    GgufPart part(const std::string& name, const std::vector<int64_t>& shape) {
        const std::string gname = gguf_tensor_name(name);
        const GgufTensor* t = gname.empty() ? nullptr : gguf_->find(gname);
        if (!t)
            throw ModelLoadError(gguf_->path() + ": missing tensor '" + gname + "' (" + name + ")");
        check_shape(gguf_->path(), gname, t->shape, shape);
        used_.insert(gname);
        return GgufPart{t, gguf_rows_permuted(config_, name) ? config_.head_dim : 0};
    }

    const ModelConfig& config_;
    at::ScalarType dtype_;
    at::Device device_;
    std::optional<SafetensorsCheckpoint> st_;
    std::optional<GgufFile> gguf_;
    std::set<std::string> used_;
};

// Inverse RoPE frequencies [D/2] in fp32, computed the way transformers does (so that the
// float rounding matches), with linear or llama3 scaling applied.
at::Tensor rope_inv_freq(const ModelConfig& c) {
    const int64_t dim = c.head_dim;
    at::Tensor exponent =
        at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
    at::Tensor inv = at::reciprocal(at::pow(c.rope_theta, exponent));
    const RopeScaling& s = c.rope_scaling;
    if (s.type == RopeScalingType::kLinear) {
        inv = inv / s.factor;
    } else if (s.type == RopeScalingType::kLlama3) {
        const double old_len = s.original_max_position_embeddings;
        const double low_wavelen = old_len / s.low_freq_factor;
        const double high_wavelen = old_len / s.high_freq_factor;
        at::Tensor wavelen = 2 * M_PI / inv;
        at::Tensor llama = at::where(wavelen > low_wavelen, inv / s.factor, inv);
        at::Tensor smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        at::Tensor smoothed = (1 - smooth) * llama / s.factor + smooth * llama;
        at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
        inv = at::where(medium, smoothed, llama);
    }
    return inv;
}

}  // namespace

Transformer::Transformer(const std::string& path, ModelConfig config, at::ScalarType dtype,
                         at::Device device, std::optional<LinearKernel> linear_kernel,
                         Quantization quantize, bool lm_head_screen)
    : config_(std::move(config)), dtype_(dtype), device_(device), quantize_(quantize) {
    screen_wanted_ = lm_head_screen;
    const ModelConfig& c = config_;
    if (quantize_.mode == Quantization::Mode::kFormat) {
        // Every linear layer's input width must hold whole groups of 32.
        for (const auto& [what, width] :
             {std::pair<const char*, int64_t>{"hidden_size", c.hidden_size},
              {"num_attention_heads * head_dim", int64_t{c.num_attention_heads} * c.head_dim},
              {"intermediate_size", c.intermediate_size}}) {
            if (width % kQuantGroup != 0) {
                throw ConfigError(
                    std::string("quantize needs every linear layer's input width to be a "
                                "multiple of ") +
                    std::to_string(kQuantGroup) + " (got " + what + " = " + std::to_string(width) +
                    ")");
            }
        }
    }
    WeightReader r(path, c, dtype, device);
    const int64_t hid = c.hidden_size, d = c.head_dim, h = c.num_attention_heads,
                  hkv = c.num_key_value_heads, inter = c.intermediate_size, v = c.vocab_size;

    // A linear weight: the dense tensor, and its GGUF parts (for packing them as they are).
    auto linear = [&](std::initializer_list<std::pair<std::string, int64_t>> parts, int64_t k) {
        std::vector<at::Tensor> dense;
        std::vector<GgufPart> gguf;
        for (const auto& [name, rows] : parts) {
            dense.push_back(r.get(name, {rows, k}));
            if (auto p = r.gguf_part(name, {rows, k})) gguf.push_back(*p);
        }
        gguf_parts_.push_back(std::move(gguf));
        return dense.size() == 1 ? dense.front() : at::cat(dense, 0).contiguous();
    };
    embed_ = r.get("model.embed_tokens.weight", {v, hid});
    for (int i = 0; i < c.num_hidden_layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        LayerWeights lw;
        lw.input_norm = r.get(p + "input_layernorm.weight", {hid});
        lw.qkv = linear({{p + "self_attn.q_proj.weight", h * d},
                         {p + "self_attn.k_proj.weight", hkv * d},
                         {p + "self_attn.v_proj.weight", hkv * d}},
                        hid);
        if (c.attention_bias) {
            lw.qkv_bias = at::cat({r.get(p + "self_attn.q_proj.bias", {h * d}),
                                   r.get(p + "self_attn.k_proj.bias", {hkv * d}),
                                   r.get(p + "self_attn.v_proj.bias", {hkv * d})},
                                  0);
        }
        lw.o = linear({{p + "self_attn.o_proj.weight", hid}}, h * d);
        if (c.attention_output_bias) lw.o_bias = r.get(p + "self_attn.o_proj.bias", {hid});
        lw.post_norm = r.get(p + "post_attention_layernorm.weight", {hid});
        lw.gate_up =
            linear({{p + "mlp.gate_proj.weight", inter}, {p + "mlp.up_proj.weight", inter}}, hid);
        lw.down = linear({{p + "mlp.down_proj.weight", hid}}, inter);
        layers_.push_back(std::move(lw));
    }
    final_norm_ = r.get("model.norm.weight", {hid});
    if (c.tie_word_embeddings) {
        lm_head_ = embed_;
        gguf_parts_.emplace_back();
        if (auto p = r.gguf_part("model.embed_tokens.weight", {v, hid}))
            gguf_parts_.back().push_back(*p);
        // Some exporters store the tied copy anyway; it must then equal the embedding's shape.
        if (r.contains("lm_head.weight")) r.get("lm_head.weight", {v, hid});
    } else {
        lm_head_ = linear({{"lm_head.weight", v}}, hid);
    }
    r.check_all_used();
    inv_freq_ = rope_inv_freq(c).to(device);
    // Quantized when asked for, or when a GGUF file holds linear weights the kernels read as they are.
    quantized_ = quantize_.mode == Quantization::Mode::kFormat;
    if (quantize_.mode == Quantization::Mode::kAuto) {
        for (size_t i = 0; i < gguf_parts_.size(); ++i) {
            const bool is_lm_head = i + 1 == gguf_parts_.size();
            if (gguf_kept_format(gguf_parts_[i]) && (!is_lm_head || quantize_.lm_head))
                quantized_ = true;
        }
    }
    pack_weights(linear_kernel);
    gguf_parts_.clear();  // the file closes with the reader
}

namespace {

// oneDNN's prepacked linear, reached through the dispatcher (ATen has no C++ function for it):
// mkldnn::_reorder_linear_weight(Tensor self, int? batch_size) -> Tensor and
// mkldnn::_linear_pointwise(Tensor X, Tensor W, Tensor? B, str attr, Scalar?[] scalars,
// str? algorithm) -> Tensor. Null when this libtorch lacks them.
std::optional<c10::OperatorHandle> find_op(const char* name) {
    return c10::Dispatcher::singleton().findSchema({name, ""});
}

const std::optional<c10::OperatorHandle>& reorder_op() {
    static const std::optional<c10::OperatorHandle> op = find_op("mkldnn::_reorder_linear_weight");
    return op;
}

const std::optional<c10::OperatorHandle>& linear_op() {
    static const std::optional<c10::OperatorHandle> op = find_op("mkldnn::_linear_pointwise");
    return op;
}

}  // namespace

namespace {

// Every kernel by name, in the order `auto` tries them (expected speed, fastest first).
constexpr std::pair<const char*, Transformer::LinearKernel> kKernelNames[] = {
    {"bf16-avx512", Transformer::LinearKernel::kBf16Dot},
    {"avx2", Transformer::LinearKernel::kAvx2},
    {"onednn", Transformer::LinearKernel::kOneDnnPacked},
    {"generic", Transformer::LinearKernel::kGeneric},
    {"aten", Transformer::LinearKernel::kAten},
};

// The fma_linear path of a kernel that has one: the avx2 kernel takes the 16-lane avx512 tiles for
// quantized weights where the CPU (and any cap) allows them; they give the avx2 tiles' bits.
CpuIsa fma_path(Transformer::LinearKernel kernel) {
    return kernel == Transformer::LinearKernel::kAvx2 ? fma_linear_path(cpu_isa())
                                                      : CpuIsa::kGeneric;
}

// The quantize option's name of a quantized format.
const char* quant_name(WeightFormat format) {
    switch (format) {
        case WeightFormat::kQ8C: return "int8";
        case WeightFormat::kQ8: return "int8-g32";
        case WeightFormat::kQ4: return "int4";
        default: return "w8a8";
    }
}

bool is_fma(Transformer::LinearKernel kernel) {
    return kernel == Transformer::LinearKernel::kAvx2 ||
           kernel == Transformer::LinearKernel::kGeneric;
}

}  // namespace

const char* linear_kernel_name(Transformer::LinearKernel kernel) {
    for (const auto& [name, k] : kKernelNames) {
        if (k == kernel) return name;
    }
    return "aten";  // not reached: every kernel is named above
}

std::optional<Transformer::LinearKernel> linear_kernel_from_name(const std::string& name) {
    for (const auto& [n, k] : kKernelNames) {
        if (name == n) return k;
    }
    return std::nullopt;
}

std::string linear_kernel_names() {
    std::string out;
    for (const auto& [name, k] : kKernelNames) out += (out.empty() ? "" : ", ") + std::string(name);
    return out;
}

std::string Transformer::kernel_shortfall(LinearKernel kernel) const {
    const bool cpu = device_.is_cpu();
    const std::string where =
        "dtype " + std::string(c10::toString(dtype_)) + " on " + device_.str();
    if (quantized_ && !is_fma(kernel)) {
        return "does not read quantized weights (the engine's avx2 and generic kernels do)";
    }
    switch (kernel) {
        case LinearKernel::kAten: return "";
        case LinearKernel::kBf16Dot: {
            const bool even = config_.hidden_size % 2 == 0 && config_.intermediate_size % 2 == 0 &&
                              (config_.num_attention_heads * config_.head_dim) % 2 == 0;
            if (!cpu || dtype_ != at::kBFloat16 || !even) {
                return "needs dtype bfloat16 on the CPU and even layer widths (got " + where + ")";
            }
            const std::string isa = cpu_isa_shortfall(CpuIsa::kAvx512Bf16);
            return isa.empty() ? ""
                               : "needs AVX512F, AVX512BW, AVX512VL and AVX512-BF16 (" + isa + ")";
        }
        case LinearKernel::kAvx2:
        case LinearKernel::kGeneric: {
            if (!cpu || (dtype_ != at::kFloat && dtype_ != at::kHalf && dtype_ != at::kBFloat16)) {
                return "needs dtype float32, float16 or bfloat16 on the CPU (got " + where + ")";
            }
            if (kernel == LinearKernel::kGeneric) return "";
            const std::string isa = cpu_isa_shortfall(CpuIsa::kAvx2);
            return isa.empty() ? "" : "needs AVX2, FMA and F16C (" + isa + ")";
        }
        case LinearKernel::kOneDnnPacked: {
            if (!cpu || (dtype_ != at::kBFloat16 && dtype_ != at::kFloat) || !at::hasMKLDNN() ||
                !reorder_op() || !linear_op()) {
                return "needs dtype bfloat16 or float32 on the CPU and a libtorch with oneDNN "
                       "(got " +
                       where + ")";
            }
            // oneDNN's bf16 reorder refuses CPUs without AVX-512 (or AVX-NE-CONVERT); checked here
            // so that the ISA cap also covers it.
            const std::string isa =
                dtype_ == at::kBFloat16 ? cpu_isa_shortfall(CpuIsa::kAvx512) : "";
            return isa.empty() ? "" : "needs AVX-512 for bfloat16 (" + isa + ")";
        }
    }
    return "";
}

at::Tensor Transformer::pack_linear(LinearKernel kernel, const at::Tensor& dense,
                                    const std::vector<GgufPart>& parts, bool is_lm_head,
                                    bool note) {
    // "checkpoint" for safetensors; else the parts' GGUF types, e.g. "Q5_0" or "Q5_0+Q8_0".
    std::string source = parts.empty() ? "checkpoint" : "";
    for (const GgufPart& p : parts) {
        const std::string type = ggml_type_name(p.tensor->type);
        if (("+" + source + "+").find("+" + type + "+") == std::string::npos)
            source += (source.empty() ? "" : "+") + type;
    }
    std::string action;
    at::Tensor out;
    const bool may_quantize = !is_lm_head || quantize_.lm_head;
    // GGUF blocks taken as they are, and in which format (auto: the file's own).
    std::optional<WeightFormat> kept = gguf_kept_format(parts);
    if (kept && quantize_.mode == Quantization::Mode::kFormat)
        kept = gguf_kept_as(*kept, quantize_.format);
    if (quantize_.mode == Quantization::Mode::kNone || !may_quantize) kept = std::nullopt;
    const std::string dtype_name = dtype_ == at::kFloat      ? "float32"
                                   : dtype_ == at::kBFloat16 ? "bfloat16"
                                   : dtype_ == at::kHalf     ? "float16"
                                                             : "float64";
    if (kernel == LinearKernel::kBf16Dot) {
        out = bf16_linear_pack(dense);
    } else if (kernel == LinearKernel::kOneDnnPacked) {
        torch::jit::Stack stack{dense, c10::IValue(static_cast<int64_t>(2))};
        reorder_op()->callBoxed(&stack);
        out = stack[0].toTensor();
    } else if (kernel == LinearKernel::kAten) {
        out = dense;
    } else if (kept) {
        out = gguf_pack_kept(parts, *kept);
        action = std::string("as they are (") + quant_name(*kept) + ")";
    } else if (may_quantize && quantize_.mode == Quantization::Mode::kFormat) {
        out = fma_linear_quantize(dense, quantize_.format);
        action = std::string("quantized to ") + quant_name(quantize_.format);
    } else {
        out = fma_linear_pack(dense, fma_path(kernel));
    }
    if (note) {
        if (action.empty())
            action = parts.empty() ? "in " + dtype_name : "dequantized to " + dtype_name;
        auto same = [&](const NoteCount& n) { return n.source == source && n.action == action; };
        auto it = std::find_if(note_counts_.begin(), note_counts_.end(), same);
        if (it == note_counts_.end()) {
            note_counts_.push_back({source, action, 1});
        } else {
            ++it->count;
        }
    }
    return out;
}

bool Transformer::try_kernel(LinearKernel kernel) {
    static const std::vector<GgufPart> kNoParts;
    auto parts = [&](size_t i) -> const std::vector<GgufPart>& {
        return i < gguf_parts_.size() ? gguf_parts_[i] : kNoParts;
    };
    // The engine's kernels are row-invariant at every row count; oneDNN from 2 rows on.
    const int min_rows = kernel == LinearKernel::kOneDnnPacked ? 2 : 1;
    // The engine's kernels add biases in fp32: converted once at load, not on every call.
    const bool fp32_bias = kernel != LinearKernel::kOneDnnPacked;
    // Exactness needs each row of a step to get the same bits whatever the step's row count.
    // Probe that on this CPU with the first layer's qkv (and bias), packed for `kernel`, before
    // packing the rest.
    LayerWeights& first = layers_.front();
    const at::Tensor packed_qkv = pack_linear(kernel, first.qkv, parts(0), false, false);
    at::Tensor bias = first.qkv_bias;
    if (bias.defined() && fp32_bias) bias = bias.to(at::kFloat);
    const int64_t hid = config_.hidden_size;
    const at::Tensor probe = at::linspace(-3.0, 3.0, 17 * hid).sin().reshape({17, hid}).to(dtype_);
    const int64_t n = first.qkv.size(0);
    const LinearKernel before = kernel_;
    kernel_ = kernel;
    const at::Tensor all = linear(probe, packed_qkv, bias, n);
    for (int64_t m : {1, 2, 3, 5, 8, 9}) {
        if (m < min_rows) continue;
        if (!at::equal(linear(probe.narrow(0, 0, m), packed_qkv, bias, n), all.narrow(0, 0, m))) {
            kernel_ = before;
            return false;
        }
    }
    note_counts_.clear();
    for (size_t i = 0; i < layers_.size(); ++i) {
        LayerWeights& lw = layers_[i];
        lw.qkv = pack_linear(kernel, lw.qkv, parts(4 * i), false, true);
        lw.o = pack_linear(kernel, lw.o, parts(4 * i + 1), false, true);
        lw.gate_up = pack_linear(kernel, lw.gate_up, parts(4 * i + 2), false, true);
        lw.down = pack_linear(kernel, lw.down, parts(4 * i + 3), false, true);
        if (fp32_bias) {
            if (lw.qkv_bias.defined()) lw.qkv_bias = lw.qkv_bias.to(at::kFloat);
            if (lw.o_bias.defined()) lw.o_bias = lw.o_bias.to(at::kFloat);
        }
    }
    // A packed copy when tied: the embedding keeps its layout.
    const at::Tensor dense_head = lm_head_;
    lm_head_ = pack_linear(kernel, lm_head_, parts(4 * layers_.size()), true, true);
    screen_.reset();
    if (screen_wanted_ && is_fma(kernel) && device_.is_cpu() && !lm_head_quantized() &&
        (dtype_ == at::kFloat || dtype_ == at::kBFloat16) &&
        config_.hidden_size % kQuantGroup == 0) {
        screen_ = LmHeadScreen::build(dense_head, fma_path(kernel), dtype_ == at::kBFloat16);
    }
    weight_notes_.clear();
    for (const NoteCount& n : note_counts_)
        weight_notes_.push_back(n.source + ": " + std::to_string(n.count) + " " + n.action);
    return true;
}

void Transformer::pack_weights(std::optional<LinearKernel> want) {
    if (want) {
        const std::string name = linear_kernel_name(*want);
        const std::string why = kernel_shortfall(*want);
        if (!why.empty()) throw ConfigError("linear_kernel '" + name + "' " + why);
        if (*want == LinearKernel::kAten) return;
        bool passed = false;
        try {
            passed = try_kernel(*want);
        } catch (const c10::Error& e) {
            kernel_ = LinearKernel::kAten;
            throw ConfigError("linear_kernel '" + name +
                              "' cannot run here: " + e.what_without_backtrace());
        }
        if (!passed) {
            throw ConfigError("linear_kernel '" + name +
                              "' gives a row different bits at "
                              "different row counts on this CPU (load-time probe); use 'auto'");
        }
        return;
    }
    // `auto`: the candidates in order of expected speed (benchmarks/linear_kernels.py); the
    // first that can run, packs and passes the probe wins. aten always runs.
    for (const auto& [name, kernel] : kKernelNames) {
        const std::string why = kernel_shortfall(kernel);
        if (!why.empty()) {
            skipped_.push_back(std::string(name) + ": " + why);
            continue;
        }
        if (kernel == LinearKernel::kAten) return;
        try {
            if (try_kernel(kernel)) return;
            skipped_.push_back(std::string(name) + ": failed the load-time row-invariance probe");
        } catch (const c10::Error& e) {
            // Only the first layer's qkv was packed (the probe's copy): the weights are intact.
            kernel_ = LinearKernel::kAten;
            skipped_.push_back(std::string(name) + ": " + e.what_without_backtrace());
        }
    }
    // Only quantized weights can leave every kernel out (aten runs everything else).
    std::string why;
    for (const std::string& s : skipped_) why += "; " + s;
    throw ConfigError("quantize: no linear kernel reads quantized weights here" + why);
}

int64_t Transformer::weight_bytes() const {
    int64_t bytes = 0;
    auto add = [&](const at::Tensor& t) {
        if (t.defined()) bytes += static_cast<int64_t>(t.nbytes());
    };
    add(embed_);
    for (const LayerWeights& lw : layers_) {
        for (const at::Tensor* t : {&lw.input_norm, &lw.qkv, &lw.qkv_bias, &lw.o, &lw.o_bias,
                                    &lw.post_norm, &lw.gate_up, &lw.down}) {
            add(*t);
        }
    }
    add(final_norm_);
    if (!lm_head_.is_same(embed_)) add(lm_head_);
    if (screen_) bytes += screen_->bytes();
    return bytes;
}

int Transformer::min_invariant_rows() const {
    if (kernel_ == LinearKernel::kBf16Dot || is_fma(kernel_)) return 1;
    if (kernel_ == LinearKernel::kOneDnnPacked || dtype_ == at::kBFloat16 || dtype_ == at::kHalf) {
        return 2;
    }
    return 4;  // MKL fp32/fp64 GEMMs
}

at::Tensor Transformer::linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                               int64_t n) const {
    if (kernel_ == LinearKernel::kBf16Dot) return bf16_linear(x.contiguous(), w, n, bias);
    if (is_fma(kernel_)) return fma_linear(x, w, n, bias, fma_path(kernel_), dtype_);
    if (kernel_ == LinearKernel::kAten) {
        return bias.defined() ? at::linear(x, w, bias) : at::linear(x, w);
    }
    // The constant arguments are built once (this runs ~7 times per layer per step).
    static const c10::IValue no_activation(std::string("none"));
    static const c10::IValue no_scalars(c10::List<std::optional<at::Scalar>>{});
    torch::jit::Stack stack{
        x.contiguous(), w,          bias.defined() ? c10::IValue(bias) : c10::IValue(),
        no_activation,  no_scalars, c10::IValue()};
    linear_op()->callBoxed(&stack);
    return stack[0].toTensor();
}

namespace {

// Float rows on a CUDA device, in a build with the fused CUDA ops (cuda/fused_ops.h): one kernel
// where the ATen expression takes several; prefill and decode steps both take it.
bool cuda_fused_applies(const at::Tensor& x) {
#if PYLA_WITH_CUDA
    const at::ScalarType t = x.scalar_type();
    return x.is_cuda() && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
#else
    (void)x;
    return false;
#endif
}

// silu(gu[:, :inter]) * gu[:, inter:] through the fused CUDA op (cuda_fused_applies(gu) only).
at::Tensor silu_mul(const at::Tensor& gu, int64_t inter) {
#if PYLA_WITH_CUDA
    return cuda_silu_mul(gu.contiguous(), inter);
#else
    (void)inter;
    return gu;  // not reached: cuda_fused_applies is false without CUDA
#endif
}

// The CPU fp32 / bf16 rows kernels/rms_norm.h takes (same bits as the ATen expression below).
bool norm_kernel_applies(const at::Tensor& x, const at::Tensor& weight) {
    const at::ScalarType t = x.scalar_type();
    return x.is_cpu() && (t == at::kFloat || t == at::kBFloat16) && x.dim() == 2 &&
           x.is_contiguous() && weight.scalar_type() == t && weight.is_contiguous();
}

template <typename T>
T* elems(const at::Tensor& t) {
    return reinterpret_cast<T*>(t.data_ptr());
}

}  // namespace

at::Tensor Transformer::rms_norm(const at::Tensor& x, const at::Tensor& weight) const {
    const float eps = static_cast<float>(config_.rms_norm_eps);  // ATen rounds the scalar so too
#if PYLA_WITH_CUDA
    if (cuda_fused_applies(x) && x.dim() == 2) return cuda_rms_norm(x.contiguous(), weight, eps);
#endif
    if (norm_kernel_applies(x, weight)) {
        at::Tensor y = at::empty_like(x);
        if (x.scalar_type() == at::kFloat) {
            rms_norm_rows(elems<float>(x), x.size(0), x.size(1), elems<float>(weight), eps,
                          elems<float>(y));
        } else {
            rms_norm_rows_bf16(elems<uint16_t>(x), x.size(0), x.size(1), elems<uint16_t>(weight),
                               eps, elems<uint16_t>(y));
        }
        return y;
    }
    // As transformers: normalise in fp32 (fp64 stays fp64), cast back, then scale.
    at::ScalarType acc = dtype_ == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor xf = x.to(acc);
    at::Tensor var = xf.pow(2).mean(-1, true);
    xf = xf * at::rsqrt(var + config_.rms_norm_eps);
    return weight * xf.to(dtype_);
}

at::Tensor Transformer::add_rms_norm(at::Tensor& x, const at::Tensor& delta,
                                     const at::Tensor& weight) const {
#if PYLA_WITH_CUDA
    if (cuda_fused_applies(x) && x.dim() == 2 && x.is_contiguous() && delta.is_contiguous() &&
        delta.sizes() == x.sizes()) {
        return cuda_add_rms_norm(x, delta, weight, static_cast<float>(config_.rms_norm_eps));
    }
#endif
    if (norm_kernel_applies(x, weight) && delta.scalar_type() == x.scalar_type() &&
        delta.is_contiguous() && delta.sizes() == x.sizes()) {
        const float eps = static_cast<float>(config_.rms_norm_eps);
        at::Tensor y = at::empty_like(x);
        if (x.scalar_type() == at::kFloat) {
            add_rms_norm_rows(elems<float>(x), elems<float>(delta), x.size(0), x.size(1),
                              elems<float>(weight), eps, elems<float>(y));
        } else {
            add_rms_norm_rows_bf16(elems<uint16_t>(x), elems<uint16_t>(delta), x.size(0), x.size(1),
                                   elems<uint16_t>(weight), eps, elems<uint16_t>(y));
        }
        return y;
    }
    x = x + delta;
    return rms_norm(x, weight);
}

at::Tensor Transformer::sdpa(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                             const std::optional<at::Tensor>& mask, bool is_causal) const {
    // q [R, H, D]; keys, values [Hkv, S, D]; mask [R, S] bool -> [R, H, D] contiguous
    const bool gqa = config_.num_attention_heads != config_.num_key_value_heads;
    return at::scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), keys.unsqueeze(0),
                                            values.unsqueeze(0), mask, /*dropout_p=*/0.0, is_causal,
                                            /*scale=*/std::nullopt, /*enable_gqa=*/gqa)
        .squeeze(0)
        .transpose(0, 1)
        .contiguous();
}

at::Tensor Transformer::apply_rope(const at::Tensor& x, const at::Tensor& cos,
                                   const at::Tensor& sin) {
    if (x.is_cpu() && x.scalar_type() == at::kFloat && cos.scalar_type() == at::kFloat &&
        x.dim() == 3 && x.stride(2) == 1 && x.stride(1) == x.size(2) && cos.is_contiguous() &&
        sin.is_contiguous()) {
        // fp32 on the CPU: one call, the same bits as the expression below (kernels/rope.h).
        at::Tensor y = at::empty(x.sizes(), x.options());
        rope_rows(x.data_ptr<float>(), x.size(0), x.size(1), x.size(2), x.stride(0),
                  cos.data_ptr<float>(), sin.data_ptr<float>(), y.data_ptr<float>());
        return y;
    }
    if (x.is_cpu() && x.scalar_type() == at::kBFloat16 && cos.scalar_type() == at::kBFloat16 &&
        x.dim() == 3 && x.stride(2) == 1 && x.stride(1) == x.size(2) && cos.is_contiguous() &&
        sin.is_contiguous()) {
        // bf16 on the CPU: likewise, with ATen's bf16 rounding of each product and sum.
        at::Tensor y = at::empty(x.sizes(), x.options());
        auto bits = [](const at::Tensor& v) {
            return reinterpret_cast<const uint16_t*>(v.const_data_ptr<at::BFloat16>());
        };
        rope_rows_bf16(bits(x), x.size(0), x.size(1), x.size(2), x.stride(0), bits(cos), bits(sin),
                       reinterpret_cast<uint16_t*>(y.mutable_data_ptr<at::BFloat16>()));
        return y;
    }
#if PYLA_WITH_CUDA
    if (cuda_fused_applies(x) && x.dim() == 3 && x.stride(2) == 1 && cos.is_contiguous() &&
        sin.is_contiguous()) {
        return cuda_rope(x, cos, sin);
    }
#endif
    const int64_t half = x.size(-1) / 2;
    at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
    at::Tensor rotated = at::cat({-x2, x1}, -1);
    return x * cos + rotated * sin;
}

at::Tensor Transformer::forward(const at::Tensor& tokens, const at::Tensor& positions,
                                const std::optional<at::Tensor>& mask, KvCache& kv, int64_t kv_len,
                                const at::Tensor& out_rows, bool row_invariant,
                                const uint8_t* host_mask) const {
    return lm_head_logits(
        forward_hidden(tokens, positions, mask, kv, kv_len, out_rows, row_invariant, host_mask));
}

at::Tensor Transformer::forward_hidden(const at::Tensor& tokens, const at::Tensor& positions,
                                       const std::optional<at::Tensor>& mask, KvCache& kv,
                                       int64_t kv_len, const at::Tensor& out_rows,
                                       bool row_invariant, const uint8_t* host_mask) const {
    const int64_t t = tokens.size(0);
    PYLA_CHECK(kv_len + t <= kv.capacity(), "step of " << t << " rows at kv_len " << kv_len
                                                       << " exceeds KV capacity " << kv.capacity());
    // Attention mask over [committed rows | step rows]. Causal with nothing committed is the
    // one case SDPA's is_causal describes exactly; otherwise build the boolean mask.
    const bool use_exact = row_invariant && device_.is_cpu();
    std::optional<at::Tensor> attn_mask;  // for SDPA only; the row-invariant kernel uses host_mask
    bool is_causal = false;
    if (!use_exact && mask.has_value()) {
        attn_mask = *mask;
    } else if (!use_exact && t > 1) {
        if (kv_len == 0) {
            is_causal = true;
        } else {
            auto opts = at::TensorOptions().dtype(at::kBool).device(device_);
            at::Tensor m = at::ones({t, kv_len + t}, opts);
            m.narrow(1, kv_len, t).copy_(at::ones({t, t}, opts).tril());
            attn_mask = m;
        }
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim));
    std::vector<int32_t> all_rows;
    if (use_exact) {
        for (int32_t r = 0; r < t; ++r) all_rows.push_back(r);
    }
    auto attend = [&](int i, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        kv.write(i, kv_len, k, v);
        if (!use_exact) {
            return sdpa(q, kv.keys(i, kv_len + t), kv.values(i, kv_len + t), attn_mask, is_causal);
        }
        // Decode steps: every row through the row-invariant kernel (the window rows too: on CPU
        // it is faster than masked SDPA for these small steps).
        at::Tensor attn = at::empty(q.sizes(), q.options());
        attention_rows(q, kv, i, kv_len, host_mask, all_rows, scale, attn);
        return attn;
    };
    Residual res = run_layers(tokens, positions, attend);
    at::Tensor normed;
    if (out_rows.size(0) == t) {
        normed = add_rms_norm(res.x, res.mlp_out, final_norm_);
    } else {
        res.x = res.x + res.mlp_out;
        normed = rms_norm(res.x.index_select(0, out_rows), final_norm_);
    }
    return normed;  // [R, hidden]
}

at::Tensor Transformer::lm_head_logits(const at::Tensor& hidden) const {
    return linear(hidden, lm_head_, {}, config_.vocab_size);  // [R, V]
}

std::vector<TokenId> Transformer::lm_head_argmax(const at::Tensor& hidden,
                                                 const std::vector<bool>& need,
                                                 at::Tensor* approx) const {
    PYLA_CHECK(screen_ != nullptr, "lm_head_argmax: no lm_head screen");
    return screen_->argmax(hidden, lm_head_, need, approx);
}

at::Tensor Transformer::forward_rows(const at::Tensor& tokens, const at::Tensor& positions,
                                     const AttendFn& attend) const {
    Residual res = run_layers(tokens, positions, attend);
    return linear(add_rms_norm(res.x, res.mlp_out, final_norm_), lm_head_, {}, config_.vocab_size);
}

Transformer::Residual Transformer::run_layers(const at::Tensor& tokens, const at::Tensor& positions,
                                              const AttendFn& attend) const {
    const ModelConfig& c = config_;
    const int64_t t = tokens.size(0), h = c.num_attention_heads, hkv = c.num_key_value_heads,
                  d = c.head_dim;
    // RoPE tables for this step's positions, fp32 then cast (as transformers does).
    at::Tensor freqs = positions.to(at::kFloat).unsqueeze(1) * inv_freq_.unsqueeze(0);  // [T, D/2]
    at::Tensor emb = at::cat({freqs, freqs}, -1);                                       // [T, D]
    at::Tensor cos = emb.cos().to(dtype_).unsqueeze(1);                                 // [T, 1, D]
    at::Tensor sin = emb.sin().to(dtype_).unsqueeze(1);

    at::Tensor x = at::embedding(embed_, tokens);  // [T, hidden], the residual stream
    at::Tensor mlp_out;  // the previous layer's MLP output, added to x by the next norm
    for (int i = 0; i < c.num_hidden_layers; ++i) {
        const LayerWeights& lw = layers_[i];
        at::Tensor hn = mlp_out.defined() ? add_rms_norm(x, mlp_out, lw.input_norm)
                                          : rms_norm(x, lw.input_norm);
        at::Tensor qkv = linear(hn, lw.qkv, lw.qkv_bias, (h + 2 * hkv) * d);  // [T, (H+2Hkv)D]
        at::Tensor q = qkv.narrow(1, 0, h * d).view({t, h, d});
        at::Tensor k = qkv.narrow(1, h * d, hkv * d).view({t, hkv, d});
        at::Tensor v = qkv.narrow(1, (h + hkv) * d, hkv * d).view({t, hkv, d});
        q = apply_rope(q, cos, sin).contiguous();
        k = apply_rope(k, cos, sin);
        at::Tensor attn = attend(i, q, k, v).view({t, h * d});  // [T, H, D] -> [T, H D]
        at::Tensor o = linear(attn, lw.o, lw.o_bias, c.hidden_size);
        hn = add_rms_norm(x, o, lw.post_norm);                                // x += o
        at::Tensor gu = linear(hn, lw.gate_up, {}, 2 * c.intermediate_size);  // [T, 2I]
        const int64_t inter = c.intermediate_size;
        at::Tensor act = cuda_fused_applies(gu)
                             ? silu_mul(gu, inter)
                             : at::silu(gu.narrow(1, 0, inter)) * gu.narrow(1, inter, inter);
        mlp_out = linear(act, lw.down, {}, c.hidden_size);
    }
    return {x, mlp_out};
}

}  // namespace pylookahead
