// Session and Model: the public, torch-free API over the engine. Every option is validated here,
// once, at the boundary (Model::load through the engine factory, Session::generate for a request);
// the decode loop below only checks invariants.
#include "pylookahead/session.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

#include "check.h"
#include "lookahead/auto/controller.h"
#include "lookahead/pool_file.h"
#include "runtime/engine_factory.h"
#include "runtime/torch_step_model.h"

namespace pylookahead {

void SessionConfig::validate() const {
    if (kv_capacity < 0) {
        throw ConfigError("kv_capacity must be >= 0 (got " + std::to_string(kv_capacity) + ")");
    }
    if (cuda_step_rows < 1 || cuda_step_rows > 1024) {
        throw ConfigError("cuda_step_rows must be in 1 .. 1024 (got " +
                          std::to_string(cuda_step_rows) + ")");
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
    const auto start = std::chrono::steady_clock::now();
    auto impl = std::make_unique<Impl>();
    impl->transformer = load_transformer(model_dir, engine, &impl->info);
    impl->info.load_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::shared_ptr<const Model>(new Model(std::move(impl)));
}

// ---- Session -----------------------------------------------------------------------------------

struct Session::Impl {
    std::shared_ptr<const Model> model;
    TorchStepModel step_model;
    AutoPlanner planner;  // step costs and acceptance statistics of automatic lookahead
    // Automatic lookahead's free prompt-lookup run; its pools follow `pool` under keep_pool.
    HistoryShadow shadow;
    // Token ids whose K/V rows the cache holds (rows 0..size-1), for reuse_cache; emptied when
    // unknown (after an error, calibrate(), prompt_logits()).
    std::vector<TokenId> context;
    // The n-gram pool kept across calls (keep_pool); maybe shared with other Sessions.
    std::shared_ptr<SharedPool> pool = std::make_shared<SharedPool>();
    // True while a call runs on this Session (BusyGuard).
    std::atomic<bool> busy{false};

    GenerationResult run(DecodeRequest& req, const GenerationConfig& gen,
                         const OnTokens& on_tokens);
    std::vector<StepCost> calibrate();  // Session::calibrate() without the busy check

    Impl(std::shared_ptr<const Model> m, const Transformer& transformer, int capacity,
         int cuda_step_rows)
        : model(std::move(m)),
          step_model(transformer, capacity,
                     DeviceStepOptions{cuda_step_rows, model->info().cuda_graphs}) {
        planner.set_fixed_shapes(step_model.prefers_fixed_shapes());
    }
};

namespace {

// Marks a Session busy for one call; a second call meanwhile (its own callback re-entering it, or
// another thread) throws SessionBusyError before touching anything.
class BusyGuard {
  public:
    BusyGuard(std::atomic<bool>& busy, const char* call) : busy_(busy) {
        if (busy_.exchange(true)) {
            throw SessionBusyError(
                std::string("Session.") + call +
                ": this Session is busy (called from its own on_tokens callback, "
                "or from two threads at once); use one Session per thread");
        }
    }
    ~BusyGuard() { busy_.store(false); }
    BusyGuard(const BusyGuard&) = delete;
    BusyGuard& operator=(const BusyGuard&) = delete;

  private:
    std::atomic<bool>& busy_;
};

// The most KV rows a Session allocates (16 Mi tokens; also keeps the row arithmetic of the step
// model far from int overflow).
constexpr int kMaxKvCapacity = 1 << 24;

int choose_capacity(const ModelConfig& c, const SessionConfig& sc) {
    int limit = c.max_position_embeddings > 0 ? c.max_position_embeddings : 4096;
    limit = std::min(limit, kMaxKvCapacity);
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
    impl_ = std::make_unique<Impl>(std::move(model), transformer, capacity, config.cuda_step_rows);
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

// The request of one generate() call, validated: gen's fields, the prompt and stop ids against the
// vocabulary, and the KV room for prompt + max_new_tokens + the widest step (`tokens_per_step`).
static DecodeRequest make_request(const ModelInfo& info, int kv_capacity,
                                  const std::vector<TokenId>& prompt, const GenerationConfig& gen,
                                  int tokens_per_step) {
    gen.validate();
    check_prompt(prompt, info.vocab_size);
    for (size_t i = 0; i < gen.stop_token_ids.size(); ++i) {
        const TokenId id = gen.stop_token_ids[i];
        if (id >= info.vocab_size) {  // >= 0 checked by gen.validate()
            throw ConfigError("stop_token_ids[" + std::to_string(i) +
                              "] must be a token id in [0, " + std::to_string(info.vocab_size) +
                              ") (got " + std::to_string(id) + ")");
        }
    }
    const int64_t prompt_len = static_cast<int64_t>(prompt.size());
    const int64_t needed = prompt_len + gen.max_new_tokens + tokens_per_step;
    if (needed > kv_capacity) {
        throw ConfigError("prompt (" + std::to_string(prompt_len) + " tokens) + max_new_tokens (" +
                          std::to_string(gen.max_new_tokens) + ") + tokens per step (" +
                          std::to_string(tokens_per_step) + ") = " + std::to_string(needed) +
                          " must be <= kv_capacity (" + std::to_string(kv_capacity) + ")");
    }
    DecodeRequest req;
    req.prompt = prompt;
    req.max_new_tokens = gen.max_new_tokens;
    if (gen.use_model_end_ids) req.end_ids = info.eos_token_ids;
    req.end_ids.insert(req.end_ids.end(), gen.stop_token_ids.begin(), gen.stop_token_ids.end());
    req.sampling = gen;
    req.keep_pool = gen.keep_pool;
    return req;
}

// Runs `req` on the Session's cache and pool, reusing the cached prefix when asked, and records
// what the cache holds afterwards.
GenerationResult Session::Impl::run(DecodeRequest& req, const GenerationConfig& gen,
                                    const OnTokens& on_tokens) {
    Impl& s = *this;
    req.pool = s.pool;
    if (gen.reuse_cache) {
        // Longest common prefix with the cached tokens, leaving at least one prompt token to run.
        const size_t limit = std::min(s.context.size(), req.prompt.size() - 1);
        size_t n = 0;
        while (n < limit && s.context[n] == req.prompt[n]) ++n;
        req.reuse_rows = static_cast<int>(n);
    }
    s.context.clear();  // unknown until run_decode returns
    at::InferenceMode guard;
    GenerationResult result = run_decode(s.step_model, req, on_tokens);
    result.stats.cuda_graphs = s.step_model.device_graphs();
    result.stats.cuda_graph_bytes = s.step_model.device_graph_bytes();
    s.context = req.prompt;
    if (!result.token_ids.empty())
        s.context.insert(s.context.end(), result.token_ids.begin(), result.token_ids.end() - 1);
    PYLA_CHECK(static_cast<int>(s.context.size()) == s.step_model.kv_len(),
               "cache holds " << s.step_model.kv_len() << " rows, context " << s.context.size());
    return result;
}

GenerationResult Session::generate(const std::vector<TokenId>& prompt, const GenerationConfig& gen,
                                   const std::optional<LookaheadConfig>& lookahead,
                                   const OnTokens& on_tokens) {
    BusyGuard busy(impl_->busy, "generate");
    if (lookahead) {
        lookahead->validate();
        const int rows = impl_->step_model.max_step_rows();
        if (rows > 0 && lookahead->tokens_per_step() > rows) {
            throw ConfigError("lookahead needs " + std::to_string(lookahead->tokens_per_step()) +
                              " tokens per step, more than the cuda_step_rows (" +
                              std::to_string(rows) +
                              ") every CUDA step runs; raise SessionConfig.cuda_step_rows or use a "
                              "smaller window_size / verification_set_size / tree_rows");
        }
    }
    DecodeRequest req = make_request(impl_->model->info(), kv_capacity(), prompt, gen,
                                     lookahead ? lookahead->tokens_per_step() : 1);
    req.lookahead = lookahead;
    if (lookahead && lookahead->tree()) {
        // A draft tree sizes each step by the step-cost table (measured on first use).
        impl_->calibrate();
        req.step_costs = &impl_->planner.costs();
    }
    return impl_->run(req, gen, on_tokens);
}

GenerationResult Session::generate(const std::vector<TokenId>& prompt, const GenerationConfig& gen,
                                   const AutoLookahead& lookahead, const OnTokens& on_tokens) {
    BusyGuard busy(impl_->busy, "generate");
    lookahead.validate();
    // Room for greedy steps at least; the lookahead steps are capped to what fits below.
    DecodeRequest req = make_request(impl_->model->info(), kv_capacity(), prompt, gen, 1);
    impl_->calibrate();
    // Tokens per step: within the calibrated range, the option's cap and the KV room left
    // after prompt + max_new_tokens (at least 1: a greedy step, checked above).
    int max_tokens = impl_->planner.costs().max_tokens();
    if (lookahead.max_tokens_per_step > 0)
        max_tokens = std::min(max_tokens, lookahead.max_tokens_per_step);
    if (impl_->step_model.max_step_rows() > 0)
        max_tokens = std::min(max_tokens, impl_->step_model.max_step_rows());
    const int64_t room = static_cast<int64_t>(kv_capacity()) - static_cast<int64_t>(prompt.size()) -
                         gen.max_new_tokens;
    max_tokens = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_tokens, room)));
    AutoController controller(impl_->planner, lookahead, max_tokens, &impl_->shadow, gen.keep_pool);
    req.policy = &controller;
    req.step_costs = &impl_->planner.costs();
    return impl_->run(req, gen, on_tokens);
}

std::vector<StepCost> Session::Impl::calibrate() {
    if (!planner.costs().has_table()) {
        CalibrationOptions options;
        options.vocab_size = model->info().vocab_size;
        if (step_model.max_step_rows() > 0) options.max_tokens = step_model.max_step_rows();
        at::InferenceMode guard;
        // The table is of steps at this thread's own count: no governor probes in it.
        struct Ungoverned {
            TorchStepModel& m;
            bool was = m.govern_threads();
            ~Ungoverned() { m.set_govern_threads(was); }
        } ungoverned{step_model};
        step_model.set_govern_threads(false);
        std::vector<StepCost> table = calibrate_step_costs(step_model, options);
        // It keeps the cached rows when there is room after them, else empties the cache.
        if (step_model.kv_len() != static_cast<int>(context.size())) context.clear();
        planner.costs().set_table(std::move(table));
    }
    return planner.costs().table();
}

std::vector<StepCost> Session::calibrate() {
    BusyGuard busy(impl_->busy, "calibrate");
    return impl_->calibrate();
}

void Session::set_step_costs(const std::vector<StepCost>& costs) {
    impl_->planner.costs().set_table(costs);
}

std::vector<StepCost> Session::step_costs() const { return impl_->planner.costs().table(); }

std::vector<float> Session::prompt_logits(const std::vector<TokenId>& prompt) {
    BusyGuard busy(impl_->busy, "prompt_logits");
    check_prompt(prompt, impl_->model->info().vocab_size);
    if (static_cast<int>(prompt.size()) > kv_capacity()) {
        throw ConfigError("prompt length must be <= kv_capacity " + std::to_string(kv_capacity()) +
                          " (got " + std::to_string(prompt.size()) + ")");
    }
    at::InferenceMode guard;
    impl_->context.clear();
    at::Tensor logits = impl_->step_model.prefill_logits(prompt).contiguous();
    impl_->step_model.reset();
    return std::vector<float>(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
}

// ---- Context and pool --------------------------------------------------------------------------

void Session::reset() {
    BusyGuard busy(impl_->busy, "reset");
    impl_->context.clear();
    impl_->step_model.reset();
    impl_->pool = std::make_shared<SharedPool>();  // a fresh private pool (leaves a shared one)
    impl_->shadow.clear_pools();
}

int Session::cached_tokens() const { return static_cast<int>(impl_->context.size()); }

int64_t Session::pool_size() const { return impl_->pool->size(); }

void Session::save_pool(const std::string& path) const {
    const ModelInfo& info = impl_->model->info();
    write_pool_file(path, *impl_->pool, PoolFileOwner{info.vocab_size, info.architecture});
}

void Session::load_pool(const std::string& path) {
    BusyGuard busy(impl_->busy, "load_pool");
    const ModelInfo& info = impl_->model->info();
    auto [pool, texts] = read_pool_file(path, PoolFileOwner{info.vocab_size, info.architecture});
    // The texts belong to the pool they came with: a file without texts leaves none.
    impl_->pool->replace(std::move(pool), std::move(texts));
    // Auto's replays start from what the loaded pool's texts hold, as a run keeping it would.
    impl_->shadow.seed_pools(*impl_->pool);
}

void Session::share_pool(Session& other) {
    BusyGuard busy(impl_->busy, "share_pool");
    const ModelInfo& mine = impl_->model->info();
    const ModelInfo& theirs = other.impl_->model->info();
    if (mine.vocab_size != theirs.vocab_size || mine.architecture != theirs.architecture) {
        throw ConfigError(
            "share_pool: the other Session's model must have the same architecture "
            "and vocab_size (" +
            mine.architecture + ", " + std::to_string(mine.vocab_size) + "; got " +
            theirs.architecture + ", " + std::to_string(theirs.vocab_size) + ")");
    }
    impl_->pool = other.impl_->pool;
    impl_->shadow.seed_pools(*impl_->pool);  // what the shared pool's texts hold now
}

}  // namespace pylookahead
