// The public C++ entry points: a loaded Model (weights, shared) and a Session (per-sequence
// state: KV cache, lookahead pool). No torch header is included here.
//
//   pylookahead::EngineConfig engine;       // cpu, float32
//   auto model = pylookahead::Model::load("/path/to/checkpoint", engine);
//   pylookahead::Session session(model);
//   pylookahead::LookaheadConfig lookahead;  // W = N = G = 4
//   pylookahead::GenerationResult out = session.generate(prompt_ids, {}, lookahead);
//
// Thread-safety: a Model is immutable after load() and may be shared by Sessions in any number
// of threads. A Session is not thread-safe: use one Session from one thread at a time; distinct
// Sessions (even over one Model) may run in parallel. Errors: see errors.h.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pylookahead/config.h"
#include "pylookahead/errors.h"
#include "pylookahead/types.h"

namespace pylookahead {

// What a loaded checkpoint is (read from its config.json and generation_config.json).
struct ModelInfo {
    std::string architecture;  // e.g. "LlamaForCausalLM"
    std::string model_dir;     // the directory it was loaded from
    std::string device;        // device it runs on, e.g. "cpu", "cuda:0"
    std::string dtype;         // compute dtype, as in EngineConfig::dtype
    int num_layers = 0;
    int hidden_size = 0;
    int num_attention_heads = 0;
    int num_key_value_heads = 0;
    int head_dim = 0;
    int vocab_size = 0;  // token ids are in [0, vocab_size)
    int max_position_embeddings = 0;
    std::vector<TokenId> eos_token_ids;  // from generation_config.json, else config.json
    bool packed_weights = false;         // CPU linear weights pre-packed (docs/design.md)
    // Kernel of the linear layers: "bf16-avx512" (bf16 on a CPU with AVX512-BF16), "avx2"
    // (fp32, fp16, bf16 on a CPU with AVX2 + FMA + F16C; quantized weights on 16-lane AVX-512
    // tiles where cpu_isa is avx512 or above, with the same bits), "onednn" (oneDNN's packed linear),
    // "generic" (the engine's kernel without SIMD assumptions), "aten" (at::linear: fp64, CUDA).
    std::string linear_kernel = "aten";
    // The kernels `auto` passed over before linear_kernel, each "name: reason" (the dtype, what
    // the CPU lacks, an error of the kernel's library, a failed row-invariance probe).
    std::vector<std::string> linear_kernel_skipped;
    // Vector ISA level of the engine's own kernels: "avx512bf16", "avx512", "avx2" or "generic"
    // (the CPU's, under any PYLOOKAHEAD_CPU_ISA cap).
    std::string cpu_isa;
    // Formats of the linear weights: "none" (dtype), "int8", "int8-g32", "int4" or "w8a8" (quantized at load, or
    // GGUF blocks of that format kept), "gguf" (a GGUF file's Q8_0/Q5_0/Q4_0/Q4_1 weights as they are).
    std::string quantize = "none";
    bool quantize_lm_head = false;  // whether the lm_head is held quantized
    bool lm_head_screen = false;    // whether greedy steps take the lm_head screen (EngineConfig)
    // How the linear weights were taken, by source, e.g. "Q4_1: 150 as they are (int4)",
    // "Q6_K: 12 dequantized to bfloat16", "checkpoint: 121 quantized to int8".
    std::vector<std::string> weight_notes;
    int64_t weight_bytes = 0;  // bytes of the weights held (linear layers as packed)
    bool cuda_graphs = false;  // EngineConfig::use_cuda_graphs on CUDA; false on the CPU
    double load_seconds = 0;   // wall time of Model::load (reading, casting, packing)
};

// Loaded weights of one Llama-family checkpoint (LlamaForCausalLM, Qwen2ForCausalLM,
// MistralForCausalLM), held on the engine's device in its dtype. Immutable after load(), so one
// Model may be shared by many Sessions in many threads. Always held by std::shared_ptr: each
// Session keeps its Model alive, and the weights' memory is freed when the last owner goes.
// Not copyable, not movable.
class Model {
  public:
    // Reads config.json (+ generation_config.json) and model.safetensors or the sharded
    // model.safetensors.index.json from `model_dir` -- or, when `model_dir` is a file, a GGUF
    // file (config from its metadata; weights in their stored formats, see
    // EngineConfig::quantize) -- casts weights to `engine.dtype` and moves them to
    // `engine.device`. The files are only read during the call.
    // Throws ConfigError (invalid `engine`, see EngineConfig::validate) or ModelLoadError
    // (missing or corrupt files, unsupported architecture, missing/unexpected tensor, shape
    // mismatch; the message names the file and the tensor or key).
    // Thread-safe, except that engine.num_threads > 0 changes libtorch's process-wide setting.
    static std::shared_ptr<const Model> load(const std::string& model_dir,
                                             const EngineConfig& engine = {});
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    // What was loaded. The reference lives as long as this Model. Thread-safe.
    const ModelInfo& info() const;

    struct Impl;  // internal (torch-side); opaque to users

  private:
    friend class Session;
    explicit Model(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Called by Session::generate after every forward pass (the prefill first) with the tokens that
// pass emitted (1..N of them), already truncated at an end id or max_new_tokens; on the
// generating thread, before generate returns. This is the streaming hook. Return true (or a
// default StreamControl) to go on; false to stop after this chunk (StopReason::kCallback, unless
// the chunk already hit an end id or max_new_tokens); StreamControl::stop_after(k) to stop and
// keep only the chunk's first k tokens (e.g. a stop string completed at its k-th token: the
// result and the cache then end exactly where one-token-per-step decoding would have stopped).
// An exception thrown by the callback ends generate() and propagates to its caller.
using OnTokens = std::function<StreamControl(const std::vector<TokenId>& tokens)>;

// Generation state for one sequence (batch 1): a static KV cache allocated once at creation and
// the lookahead state. Owns its cache memory (kv_capacity() rows, on the Model's device) and
// shares ownership of its Model. Movable, not copyable; a moved-from Session may only be
// destroyed or assigned to. Not thread-safe: use one Session from one thread at a time; distinct
// Sessions (even over one Model) may run in parallel threads.
class Session {
  public:
    // Allocates the KV cache. Throws ConfigError if `model` is null, config.kv_capacity < 0, or
    // config.kv_capacity exceeds the model's max_position_embeddings (or sliding window).
    // Allocation failures from libtorch propagate (c10::Error).
    explicit Session(std::shared_ptr<const Model> model, const SessionConfig& config = {});
    ~Session();
    Session(Session&&) noexcept;
    Session& operator=(Session&&) noexcept;
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Greedy decoding of `prompt` (token ids), or sampling when gen.temperature > 0. It starts
    // from an empty cache and an empty n-gram pool unless gen.reuse_cache / gen.keep_pool say
    // otherwise. With `lookahead` set, runs Lookahead decoding, whose output equals plain
    // decoding (greedy, or sampled with the same seed) token for token; it only takes fewer
    // forward passes. Generation stops at an end id (kept as the last token), at
    // gen.max_new_tokens, or when `on_tokens` says so; `on_tokens` may be empty.
    // Throws ConfigError on bad options (GenerationConfig / LookaheadConfig::validate), an empty
    // prompt, prompt or stop ids outside [0, vocab_size), or when prompt length +
    // max_new_tokens + lookahead->tokens_per_step() (1 for greedy) exceeds kv_capacity().
    // Errors from libtorch (e.g. device out of memory) propagate as c10::Error. After any
    // exception the Session remains usable.
    GenerationResult generate(const std::vector<TokenId>& prompt, const GenerationConfig& gen = {},
                              const std::optional<LookaheadConfig>& lookahead = std::nullopt,
                              const OnTokens& on_tokens = nullptr);

    // Automatic lookahead: like the call above, but the engine picks, step by step, greedy steps
    // or lookahead steps of some (W, N, G) (see AutoLookahead and docs/auto.md). The output is
    // still greedy decoding's, token for token; GenerationStats::auto_decisions lists the
    // switches. The first such call on a Session runs calibrate() unless a table was set. What
    // the planner learns about this Session's text and step times carries over to later calls.
    // Throws as the call above (the KV room needed is prompt + max_new_tokens + 1: the tokens
    // per step are capped to what fits), or ConfigError for bad AutoLookahead fields.
    GenerationResult generate(const std::vector<TokenId>& prompt, const GenerationConfig& gen,
                              const AutoLookahead& lookahead, const OnTokens& on_tokens = nullptr);

    // Measures, once per Session, the wall time of one decode forward pass against its tokens
    // (T = 1, 2, 3, 4, 8, 16, 32, 64, and 128, 256 while a step of 64 costs under 2.5 greedy
    // steps), timed in 3 rounds after a warm-up round (each point: the median of its time over
    // its round's greedy step, times the median greedy step), over 128 dummy rows placed after
    // the rows the cache holds (which stay reusable; when fewer than 128 rows are free after
    // them the cache is emptied instead; fewer dummy rows in a small cache). Returns the table
    // (ascending T, the first T = 1); later calls return it without measuring. Takes roughly 45
    // forward passes.
    std::vector<StepCost> calibrate();
    // Replaces the table (e.g. one measured earlier, or a synthetic one for tests) and forgets
    // the step times measured so far. Throws ConfigError unless every tokens is in [1, 4096] and
    // distinct, one of them is 1, and every seconds is finite and > 0. Automatic lookahead then
    // never runs steps wider than the table's largest T.
    void set_step_costs(const std::vector<StepCost>& costs);
    // The current table; empty before calibrate() / set_step_costs().
    std::vector<StepCost> step_costs() const;

    // Logits of every prompt position, run as one prefill from an empty cache: [L * V] row-major
    // fp32 (row i predicts token i+1). For parity checks and scoring; resets the cache.
    // Throws ConfigError on an empty prompt, ids outside [0, vocab_size), or a prompt longer
    // than kv_capacity().
    std::vector<float> prompt_logits(const std::vector<TokenId>& prompt);

    // ---- Context kept between calls (GenerationConfig::reuse_cache / keep_pool) ----
    // Forgets the cached context and the n-gram pool. A shared pool is left to the other
    // Sessions: this one gets a fresh private pool.
    void reset();
    // Tokens whose K/V rows the cache holds now (prompt + output but its last token, after a
    // generate(); 0 after reset(), prompt_logits() or an error, and after a calibrate() that
    // found no room after them).
    int cached_tokens() const;
    // N-grams in this Session's pool.
    int64_t pool_size() const;
    // Writes the pool to `path`: its n-grams and the texts (prompts and outputs) that a larger N
    // rebuilds it from (binary, see docs/session.md; via a temporary file and a rename). Throws
    // ConfigError when the file cannot be written.
    void save_pool(const std::string& path) const;
    // Replaces the pool's n-grams and texts with those saved in `path` (a file of version 1 or 2
    // has no texts: the pool then has none), into the shared pool if this Session shares one.
    // Use them with GenerationConfig::keep_pool. Throws ConfigError naming the file and the
    // field when it cannot be read, is corrupt, or was saved for a model with another
    // architecture or vocab_size.
    void load_pool(const std::string& path);
    // From now on this Session uses `other`'s pool (its own is dropped): both read and grow one
    // pool, under a mutex, also from parallel threads. Lookahead output does not depend on the
    // pool's content, only the speed does. Throws ConfigError if the models differ in
    // architecture or vocab_size.
    void share_pool(Session& other);

    // The Model this Session runs; the reference lives as long as this Session.
    const Model& model() const;
    // Rows of the KV cache: the longest prompt + new tokens + one step this Session can run.
    int kv_capacity() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace pylookahead
