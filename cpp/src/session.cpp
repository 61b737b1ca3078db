// Session and Model: the public, torch-free API over the engine. Options are validated here,
// once, at the boundary.
#include "pylookahead/session.h"

#include <ATen/Parallel.h>
#include <ATen/Context.h>

#include <algorithm>

#include "io/model_config.h"
#include "lookahead/auto_planner.h"
#include "model/transformer.h"
#include "runtime/torch_step_model.h"

namespace pylookahead {

namespace {

at::ScalarType parse_dtype(const std::string& s) {
    if (s == "float32") return at::kFloat;
    if (s == "bfloat16") return at::kBFloat16;
    if (s == "float16") return at::kHalf;
    if (s == "float64") return at::kDouble;
    throw ConfigError("dtype must be one of float32, bfloat16, float16, float64 (got '" + s + "')");
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
}

void SessionConfig::validate() const {
    if (kv_capacity < 0) {
        throw ConfigError("kv_capacity must be >= 0 (got " + std::to_string(kv_capacity) + ")");
    }
}

// ---- Model -------------------------------------------------------------------------------------

struct Model::Impl {
    ModelInfo info;
    std::unique_ptr<Transformer> transformer;
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

const ModelInfo& Model::info() const { return impl_->info; }

std::shared_ptr<const Model> Model::load(const std::string& model_dir, const EngineConfig& engine) {
    engine.validate();
    if (engine.num_threads > 0) at::set_num_threads(engine.num_threads);
    at::ScalarType dtype = parse_dtype(engine.dtype);
    at::Device device = parse_device(engine.device);

    ModelConfig config = load_model_config(model_dir);
    auto impl = std::make_unique<Impl>();
    ModelInfo& info = impl->info;
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
    try {
        impl->transformer = std::make_unique<Transformer>(model_dir, std::move(config), dtype, device);
    } catch (const c10::Error& e) {
        throw ModelLoadError(model_dir + ": loading weights failed: " + e.what_without_backtrace());
    }
    return std::shared_ptr<const Model>(new Model(std::move(impl)));
}

// ---- Session -----------------------------------------------------------------------------------

struct Session::Impl {
    std::shared_ptr<const Model> model;
    TorchStepModel step_model;
    AutoPlanner planner;  // step costs and acceptance statistics of automatic lookahead

    Impl(std::shared_ptr<const Model> m, const Transformer& transformer, int capacity)
        : model(std::move(m)), step_model(transformer, capacity) {}
};

namespace {

int choose_capacity(const ModelConfig& c, const SessionConfig& sc) {
    int limit = c.max_position_embeddings > 0 ? c.max_position_embeddings : 4096;
    if (c.sliding_window > 0) limit = std::min(limit, c.sliding_window);
    if (sc.kv_capacity == 0) return std::min(limit, 4096);
    if (sc.kv_capacity > limit) {
        throw ConfigError("kv_capacity must be <= " + std::to_string(limit) +
                          " (max_position_embeddings" +
                          std::string(c.sliding_window > 0 ? " / sliding_window" : "") +
                          " of this model) (got " + std::to_string(sc.kv_capacity) + ")");
    }
    return sc.kv_capacity;
}

}  // namespace

Session::Session(std::shared_ptr<const Model> model, const SessionConfig& config) {
    if (!model) throw ConfigError("model must not be null");
    config.validate();
    const Transformer& transformer = *model->impl_->transformer;
    int capacity = choose_capacity(transformer.config(), config);
    impl_ = std::make_unique<Impl>(std::move(model), transformer, capacity);
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

const Model& Session::model() const { return *impl_->model; }
int Session::kv_capacity() const { return impl_->step_model.kv_capacity(); }

static void check_prompt(const std::vector<TokenId>& prompt, int vocab_size) {
    if (prompt.empty()) throw ConfigError("prompt must hold at least one token (got 0)");
    for (size_t i = 0; i < prompt.size(); ++i) {
        if (prompt[i] < 0 || prompt[i] >= vocab_size) {
            throw ConfigError("prompt[" + std::to_string(i) + "] must be a token id in [0, " +
                              std::to_string(vocab_size) + ") (got " + std::to_string(prompt[i]) +
                              ")");
        }
    }
}

static DecodeRequest make_request(const ModelInfo& info, const std::vector<TokenId>& prompt,
                                  const GenerationConfig& gen) {
    gen.validate();
    check_prompt(prompt, info.vocab_size);
    for (TokenId id : gen.stop_token_ids) {
        if (id < 0 || id >= info.vocab_size) {
            throw ConfigError("stop_token_ids must hold token ids in [0, " +
                              std::to_string(info.vocab_size) + ") (got " + std::to_string(id) + ")");
        }
    }
    DecodeRequest req;
    req.prompt = prompt;
    req.max_new_tokens = gen.max_new_tokens;
    if (gen.use_model_end_ids) req.end_ids = info.eos_token_ids;
    req.end_ids.insert(req.end_ids.end(), gen.stop_token_ids.begin(), gen.stop_token_ids.end());
    return req;
}

GenerationResult Session::generate(const std::vector<TokenId>& prompt, const GenerationConfig& gen,
                                   const std::optional<LookaheadConfig>& lookahead,
                                   const OnTokens& on_tokens) {
    gen.validate();
    if (lookahead) lookahead->validate();
    DecodeRequest req = make_request(impl_->model->info(), prompt, gen);
    req.lookahead = lookahead;
    at::InferenceMode guard;
    return run_decode(impl_->step_model, req, on_tokens);
}

GenerationResult Session::generate(const std::vector<TokenId>& prompt, const GenerationConfig& gen,
                                   const AutoLookahead& lookahead, const OnTokens& on_tokens) {
    gen.validate();
    lookahead.validate();
    DecodeRequest req = make_request(impl_->model->info(), prompt, gen);
    calibrate();
    // Tokens per step: within the calibrated range, the option's cap and the KV room left
    // after prompt + max_new_tokens (at least 1: a greedy step, which run_decode checks).
    int max_tokens = impl_->planner.costs().max_tokens();
    if (lookahead.max_tokens_per_step > 0) max_tokens = std::min(max_tokens, lookahead.max_tokens_per_step);
    const int64_t room = static_cast<int64_t>(kv_capacity()) - static_cast<int64_t>(prompt.size()) -
                         gen.max_new_tokens;
    max_tokens = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_tokens, room)));
    AutoController controller(impl_->planner, lookahead, max_tokens);
    req.policy = &controller;
    at::InferenceMode guard;
    return run_decode(impl_->step_model, req, on_tokens);
}

std::vector<StepCost> Session::calibrate() {
    if (!impl_->planner.costs().has_table()) {
        CalibrationOptions options;
        options.vocab_size = impl_->model->info().vocab_size;
        at::InferenceMode guard;
        std::vector<StepCost> table = calibrate_step_costs(impl_->step_model, options);
        impl_->planner.costs().set_table(std::move(table));
    }
    return impl_->planner.costs().table();
}

void Session::set_step_costs(const std::vector<StepCost>& costs) {
    impl_->planner.costs().set_table(costs);
}

std::vector<StepCost> Session::step_costs() const { return impl_->planner.costs().table(); }

std::vector<float> Session::prompt_logits(const std::vector<TokenId>& prompt) {
    check_prompt(prompt, impl_->model->info().vocab_size);
    if (static_cast<int>(prompt.size()) > kv_capacity()) {
        throw ConfigError("prompt length must be <= kv_capacity " + std::to_string(kv_capacity()) +
                          " (got " + std::to_string(prompt.size()) + ")");
    }
    at::InferenceMode guard;
    at::Tensor logits = impl_->step_model.prefill_logits(prompt).contiguous();
    impl_->step_model.reset();
    return std::vector<float>(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
}

}  // namespace pylookahead
