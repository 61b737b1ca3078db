#include "runtime/engine_factory.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <optional>
#include <thread>
#include <utility>

#include "io/gguf.h"
#include "io/gguf_config.h"
#include "io/model_config.h"
#include "kernels/cpu_isa.h"

namespace pylookahead {

namespace {

at::ScalarType parse_dtype(const std::string& s) {
    if (s == "float32") return at::kFloat;
    if (s == "bfloat16") return at::kBFloat16;
    if (s == "float16") return at::kHalf;
    if (s == "float64") return at::kDouble;
    throw ConfigError("dtype must be one of float32, bfloat16, float16, float64 (got '" + s + "')");
}

// nullopt = "auto".
std::optional<Transformer::LinearKernel> parse_linear_kernel(const std::string& s) {
    if (s == "auto") return std::nullopt;
    if (auto kernel = linear_kernel_from_name(s)) return kernel;
    throw ConfigError("linear_kernel must be one of auto, " + linear_kernel_names() + " (got '" +
                      s + "')");
}

Transformer::Quantization parse_quantize(const std::string& s, bool lm_head) {
    using Mode = Transformer::Quantization::Mode;
    if (s == "auto") return {Mode::kAuto, WeightFormat::kQ8, lm_head};
    if (s == "none") return {Mode::kNone, WeightFormat::kQ8, lm_head};
    if (s == "int8") return {Mode::kFormat, WeightFormat::kQ8C, lm_head};
    if (s == "int8-g32") return {Mode::kFormat, WeightFormat::kQ8, lm_head};
    if (s == "int4") return {Mode::kFormat, WeightFormat::kQ4, lm_head};
    if (s == "w8a8") return {Mode::kFormat, WeightFormat::kQ8A8, lm_head};
    throw ConfigError("quantize must be one of auto, none, int8, int8-g32, int4, w8a8 (got '" + s +
                      "')");
}

at::Device parse_device(const std::string& s) {
    at::Device dev(at::kCPU);
    try {
        dev = at::Device(s);
    } catch (const std::exception&) {
        throw ConfigError("device must be 'cpu', 'cuda' or 'cuda:K' (got '" + s + "')");
    }
    if (dev.is_cuda()) {
        if (!at::hasCUDA()) {
            throw ConfigError("device '" + s + "' requested but this libtorch has no usable CUDA");
        }
        if (!dev.has_index()) dev = at::Device(at::kCUDA, 0);  // "cuda" is cuda:0
    } else if (!dev.is_cpu()) {
        throw ConfigError("device must be 'cpu', 'cuda' or 'cuda:K' (got '" + s + "')");
    }
    return dev;
}

}  // namespace

void EngineConfig::validate() const {
    parse_dtype(dtype);
    parse_device(device);
    if (num_threads < 0) {
        throw ConfigError("num_threads must be >= 0 (got " + std::to_string(num_threads) + ")");
    }
    // More threads than CPUs only time-slice (and libgomp fails to start tens of thousands).
    const unsigned cpus = std::thread::hardware_concurrency();
    const int max_threads = cpus > 0 ? static_cast<int>(cpus) : 1024;
    if (num_threads > max_threads) {
        throw ConfigError("num_threads must be <= " + std::to_string(max_threads) +
                          " (this machine's CPUs) (got " + std::to_string(num_threads) + ")");
    }
    parse_linear_kernel(linear_kernel);
    if (parse_device(device).is_cuda() && parse_dtype(dtype) == at::kDouble) {
        throw ConfigError("dtype 'float64' runs on the CPU only (got device '" + device + "')");
    }
    if (parse_quantize(quantize, quantize_lm_head).mode ==
            Transformer::Quantization::Mode::kFormat &&
        !parse_device(device).is_cpu()) {
        throw ConfigError("quantize '" + quantize + "' runs on the CPU only (got device '" +
                          device + "')");
    }
}

std::unique_ptr<Transformer> load_transformer(const std::string& model_dir,
                                              const EngineConfig& engine, ModelInfo* out) {
    engine.validate();
    if (engine.num_threads > 0) at::set_num_threads(engine.num_threads);
    at::ScalarType dtype = parse_dtype(engine.dtype);
    at::Device device = parse_device(engine.device);

    ModelConfig config = is_gguf_checkpoint(model_dir) ? gguf_model_config(GgufFile(model_dir))
                                                       : load_model_config(model_dir);
    ModelInfo& info = *out;
    info.architecture = config.architecture;
    info.model_dir = model_dir;
    info.device = device.str();
    info.dtype = engine.dtype;
    info.num_layers = config.num_hidden_layers;
    info.hidden_size = config.hidden_size;
    info.num_attention_heads = config.num_attention_heads;
    info.num_key_value_heads = config.num_key_value_heads;
    info.head_dim = config.head_dim;
    info.vocab_size = config.vocab_size;
    info.max_position_embeddings = config.max_position_embeddings;
    info.eos_token_ids = config.eos_token_ids;
    info.cpu_isa = cpu_isa_name(cpu_isa());
    Transformer::Quantization quantize = parse_quantize(engine.quantize, engine.quantize_lm_head);
    // "auto" keeps a GGUF's blocks where the engine's CPU kernels can read them; elsewhere it is "none".
    if (quantize.mode == Transformer::Quantization::Mode::kAuto && !device.is_cpu()) {
        quantize.mode = Transformer::Quantization::Mode::kNone;
    }
    std::unique_ptr<Transformer> transformer;
    try {
        transformer = std::make_unique<Transformer>(model_dir, std::move(config), dtype, device,
                                                    parse_linear_kernel(engine.linear_kernel),
                                                    quantize, engine.lm_head_screen);
    } catch (const c10::Error& e) {
        throw ModelLoadError(model_dir + ": loading weights failed: " + e.what_without_backtrace());
    }
    const Transformer& t = *transformer;
    info.quantize = !t.quantized() ? "none" : engine.quantize == "auto" ? "gguf" : engine.quantize;
    info.quantize_lm_head = t.lm_head_quantized();
    info.lm_head_screen = t.lm_head_screen();
    info.weight_notes = t.weight_notes();
    info.weight_bytes = t.weight_bytes();
    info.packed_weights = t.packed_weights();
    info.linear_kernel = linear_kernel_name(t.linear_kernel());
    info.linear_kernel_skipped = t.linear_kernel_skipped();
    info.cuda_graphs = device.is_cuda() && engine.use_cuda_graphs;
    return transformer;
}

}  // namespace pylookahead
