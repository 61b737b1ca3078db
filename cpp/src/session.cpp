// Session and Model: the public, torch-free API over the engine. Options are validated here,
// once, at the boundary.
#include "pylookahead/session.h"

#include <ATen/Parallel.h>
#include <ATen/Context.h>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "check.h"
#include "io/binary_io.h"
#include "io/gguf.h"
#include "io/gguf_config.h"
#include "io/model_config.h"
#include "io/regular_file.h"
#include "kernels/cpu_isa.h"
#include "lookahead/auto/controller.h"
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

// nullopt = "auto".
std::optional<Transformer::LinearKernel> parse_linear_kernel(const std::string& s) {
    if (s == "auto") return std::nullopt;
    if (auto kernel = linear_kernel_from_name(s)) return kernel;
    throw ConfigError("linear_kernel must be one of auto, " + linear_kernel_names() + " (got '" + s +
                      "')");
}

Transformer::Quantization parse_quantize(const std::string& s, bool lm_head) {
    using Mode = Transformer::Quantization::Mode;
    if (s == "auto") return {Mode::kAuto, WeightFormat::kQ8, lm_head};
    if (s == "none") return {Mode::kNone, WeightFormat::kQ8, lm_head};
    if (s == "int8") return {Mode::kFormat, WeightFormat::kQ8, lm_head};
    if (s == "int4") return {Mode::kFormat, WeightFormat::kQ4, lm_head};
    throw ConfigError("quantize must be one of auto, none, int8, int4 (got '" + s + "')");
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
    // More threads than CPUs only time-slice (and libgomp fails to start tens of thousands).
    const unsigned cpus = std::thread::hardware_concurrency();
    const int max_threads = cpus > 0 ? static_cast<int>(cpus) : 1024;
    if (num_threads > max_threads) {
        throw ConfigError("num_threads must be <= " + std::to_string(max_threads) +
                          " (this machine's CPUs) (got " + std::to_string(num_threads) + ")");
    }
    parse_linear_kernel(linear_kernel);
    if (parse_quantize(quantize, quantize_lm_head).mode == Transformer::Quantization::Mode::kFormat &&
        !parse_device(device).is_cpu()) {
        throw ConfigError("quantize '" + quantize + "' runs on the CPU only (got device '" + device + "')");
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
    const auto start = std::chrono::steady_clock::now();
    engine.validate();
    if (engine.num_threads > 0) at::set_num_threads(engine.num_threads);
    at::ScalarType dtype = parse_dtype(engine.dtype);
    at::Device device = parse_device(engine.device);

    ModelConfig config = is_gguf_checkpoint(model_dir) ? gguf_model_config(GgufFile(model_dir))
                                                       : load_model_config(model_dir);
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
    info.cpu_isa = cpu_isa_name(cpu_isa());
    Transformer::Quantization quantize = parse_quantize(engine.quantize, engine.quantize_lm_head);
    // "auto" keeps a GGUF's blocks where the engine's CPU kernels can read them; elsewhere it is "none".
    if (quantize.mode == Transformer::Quantization::Mode::kAuto && !device.is_cpu()) {
        quantize.mode = Transformer::Quantization::Mode::kNone;
    }
    try {
        impl->transformer = std::make_unique<Transformer>(model_dir, std::move(config), dtype, device,
                                                          parse_linear_kernel(engine.linear_kernel),
                                                          quantize);
        const Transformer& t = *impl->transformer;
        info.quantize = !t.quantized() ? "none" : engine.quantize == "auto" ? "gguf" : engine.quantize;
        info.quantize_lm_head = t.lm_head_quantized();
        info.weight_notes = t.weight_notes();
        info.weight_bytes = t.weight_bytes();
        info.packed_weights = impl->transformer->packed_weights();
        info.linear_kernel = linear_kernel_name(impl->transformer->linear_kernel());
        info.linear_kernel_skipped = impl->transformer->linear_kernel_skipped();
    } catch (const c10::Error& e) {
        throw ModelLoadError(model_dir + ": loading weights failed: " + e.what_without_backtrace());
    }
    info.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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

    GenerationResult run(DecodeRequest& req, const GenerationConfig& gen, const OnTokens& on_tokens);
    std::vector<StepCost> calibrate();  // Session::calibrate() without the busy check

    Impl(std::shared_ptr<const Model> m, const Transformer& transformer, int capacity)
        : model(std::move(m)), step_model(transformer, capacity) {
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
            throw SessionBusyError(std::string("Session.") + call +
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
    s.context = req.prompt;
    if (!result.tokens.empty()) s.context.insert(s.context.end(), result.tokens.begin(), result.tokens.end() - 1);
    PYLA_CHECK(static_cast<int>(s.context.size()) == s.step_model.kv_len(),
               "cache holds " << s.step_model.kv_len() << " rows, context " << s.context.size());
    return result;
}

GenerationResult Session::generate(const std::vector<TokenId>& prompt, const GenerationConfig& gen,
                                   const std::optional<LookaheadConfig>& lookahead,
                                   const OnTokens& on_tokens) {
    BusyGuard busy(impl_->busy, "generate");
    gen.validate();
    if (lookahead) lookahead->validate();
    DecodeRequest req = make_request(impl_->model->info(), prompt, gen);
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
    gen.validate();
    lookahead.validate();
    DecodeRequest req = make_request(impl_->model->info(), prompt, gen);
    impl_->calibrate();
    // Tokens per step: within the calibrated range, the option's cap and the KV room left
    // after prompt + max_new_tokens (at least 1: a greedy step, which run_decode checks).
    int max_tokens = impl_->planner.costs().max_tokens();
    if (lookahead.max_tokens_per_step > 0) max_tokens = std::min(max_tokens, lookahead.max_tokens_per_step);
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

int64_t Session::pool_size() const {
    std::lock_guard<std::mutex> lock(impl_->pool->mutex);
    return impl_->pool->pool.size();
}

namespace {

constexpr char kPoolMagic[8] = {'P', 'Y', 'L', 'A', 'P', 'O', 'O', 'L'};
// 2: entries carry their context (NgramPool::kContextLen ids); 3: the pool's texts follow it.
constexpr uint32_t kPoolVersion = 3;

uint32_t read_u32(std::istream& in, const std::string& path, const char* field) {
    uint32_t v = 0;
    if (!read_u32_le(in, &v)) {
        throw ConfigError(path + ": not a pylookahead pool file (truncated before " + field + ")");
    }
    return v;
}

}  // namespace

void Session::save_pool(const std::string& path) const {
    const ModelInfo& info = impl_->model->info();
    std::ostringstream body;
    {
        std::lock_guard<std::mutex> lock(impl_->pool->mutex);
        impl_->pool->pool.write(body);
        // The texts a larger N rebuilds the pool from (SharedPool::pool_from_texts).
        write_u32_le(body, static_cast<uint32_t>(impl_->pool->texts.size()));
        for (const std::vector<TokenId>& text : impl_->pool->texts) {
            write_u32_le(body, static_cast<uint32_t>(text.size()));
            for (TokenId id : text) write_u32_le(body, static_cast<uint32_t>(id));
        }
    }
    // Written to a temporary file beside the file it replaces, then renamed over it: a reader never
    // sees half a file. A symlink is followed (the file it points to is replaced, the link stays);
    // anything there that is not a regular file is refused, never replaced.
    std::string target = path;
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
        char* resolved = ::realpath(path.c_str(), nullptr);
        if (resolved == nullptr) {
            throw ConfigError("path: '" + path + "' is a symlink to a missing file or directory");
        }
        target = resolved;
        std::free(resolved);
    }
    if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        throw ConfigError("path: '" + path + "' exists and is not a regular file (refusing to replace it)");
    }
    const std::string tmp = target + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw ConfigError("path: cannot write the pool file '" + tmp + "'");
        out.write(kPoolMagic, sizeof(kPoolMagic));
        write_u32_le(out, kPoolVersion);
        write_u32_le(out, static_cast<uint32_t>(info.vocab_size));
        write_u32_le(out, static_cast<uint32_t>(info.architecture.size()));
        out.write(info.architecture.data(), static_cast<std::streamsize>(info.architecture.size()));
        const std::string data = body.str();
        out.write(data.data(), static_cast<std::streamsize>(data.size()));
        out.flush();
        if (!out) throw ConfigError("path: writing the pool file '" + tmp + "' failed");
    }
    if (std::rename(tmp.c_str(), target.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw ConfigError("path: cannot rename '" + tmp + "' to '" + target + "'");
    }
}

void Session::load_pool(const std::string& path) {
    BusyGuard busy(impl_->busy, "load_pool");
    const ModelInfo& info = impl_->model->info();
    // Read whole (pool files are at most a few MiB) from a regular file: a FIFO would block.
    const std::optional<std::string> data = read_regular_file(path, FileError::kConfig, true);
    if (!data) throw ConfigError("path: cannot open the pool file '" + path + "' (missing)");
    std::istringstream in(*data);
    char magic[sizeof(kPoolMagic)] = {};
    if (!in.read(magic, sizeof(magic)) || std::memcmp(magic, kPoolMagic, sizeof(magic)) != 0) {
        throw ConfigError(path + ": not a pylookahead pool file (magic must be 'PYLAPOOL')");
    }
    const uint32_t version = read_u32(in, path, "version");
    if (version < 1 || version > kPoolVersion) {  // 1: entries without contexts; 2: no texts
        throw ConfigError(path + ": pool file version must be 1, 2 or " +
                          std::to_string(kPoolVersion) + " (got " + std::to_string(version) + ")");
    }
    const uint32_t vocab = read_u32(in, path, "vocab_size");
    if (vocab != static_cast<uint32_t>(info.vocab_size)) {
        throw ConfigError(path + ": pool vocab_size must equal the model's " +
                          std::to_string(info.vocab_size) + " (got " + std::to_string(vocab) + ")");
    }
    const uint32_t arch_len = read_u32(in, path, "architecture");
    if (arch_len > 256) {
        throw ConfigError(path + ": pool architecture name length must be <= 256 (got " +
                          std::to_string(arch_len) + ")");
    }
    std::string arch(arch_len, '\0');
    if (!in.read(arch.data(), arch_len)) {
        throw ConfigError(path + ": not a pylookahead pool file (truncated in architecture)");
    }
    if (arch != info.architecture) {
        throw ConfigError(path + ": pool architecture must equal the model's '" +
                          info.architecture + "' (got '" + arch + "')");
    }
    NgramPool pool = NgramPool::read(in, path, info.vocab_size, /*with_contexts=*/version >= 2);
    SharedPool texts;  // only its texts are used
    if (version >= 3) {
        const uint32_t count = read_u32(in, path, "text count");
        for (uint32_t t = 0; t < count; ++t) {
            const uint32_t len = read_u32(in, path, "text length");
            if (len < 1 || len > SharedPool::kMaxTextTokens) {
                throw ConfigError(path + ": pool text length must be in [1, " +
                                  std::to_string(SharedPool::kMaxTextTokens) + "] (got " +
                                  std::to_string(len) + " in text " + std::to_string(t) + ")");
            }
            std::vector<TokenId> text(len);
            for (uint32_t i = 0; i < len; ++i) {
                const uint32_t id = read_u32(in, path, "text token id");
                if (id >= static_cast<uint32_t>(info.vocab_size)) {
                    throw ConfigError(path + ": pool text token id must be < vocab_size " +
                                      std::to_string(info.vocab_size) + " (got " +
                                      std::to_string(id) + " in text " + std::to_string(t) + ")");
                }
                text[i] = static_cast<TokenId>(id);
            }
            texts.add_text(std::move(text));  // keeps the newest kMaxTextTokens, as saving did
        }
    }
    if (in.peek() != std::char_traits<char>::eof()) {
        throw ConfigError(path + ": trailing bytes after the pool data");
    }
    // Auto's replays start from what the loaded pool's texts hold, as a run keeping it would.
    impl_->shadow.seed_pools(texts);
    std::lock_guard<std::mutex> lock(impl_->pool->mutex);
    impl_->pool->pool = std::move(pool);
    // The texts belong to the pool they came with: a file without texts leaves none (before, the
    // session's own texts stayed, and a larger N rebuilt the pool from them, dropping the loaded one).
    impl_->pool->texts = std::move(texts.texts);
    impl_->pool->text_tokens = texts.text_tokens;
}

void Session::share_pool(Session& other) {
    BusyGuard busy(impl_->busy, "share_pool");
    const ModelInfo& mine = impl_->model->info();
    const ModelInfo& theirs = other.impl_->model->info();
    if (mine.vocab_size != theirs.vocab_size || mine.architecture != theirs.architecture) {
        throw ConfigError("share_pool: the other Session's model must have the same architecture "
                          "and vocab_size (" + mine.architecture + ", " +
                          std::to_string(mine.vocab_size) + "; got " + theirs.architecture +
                          ", " + std::to_string(theirs.vocab_size) + ")");
    }
    impl_->pool = other.impl_->pool;
    std::lock_guard<std::mutex> lock(impl_->pool->mutex);
    impl_->shadow.seed_pools(*impl_->pool);  // what the shared pool's texts hold now
}

}  // namespace pylookahead
