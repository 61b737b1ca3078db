// Option structs of the public C++ API. Each field has a default and a one-line meaning.
//
// All four are plain values: copy them freely; a const instance may be read from any number of
// threads. validate() checks the fields on their own (no model needed) and throws ConfigError
// whose message names the field, the value and the rule, e.g. "ngram_size must be >= 2 (got 1)".
// Model::load, Session and Session::generate call validate() themselves; call it earlier only to
// report bad options before doing any work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pylookahead/types.h"

namespace pylookahead {

// Lookahead decoding (Fu et al., ICML 2024). One step runs a W x (N-1) Jacobi window and up to
// G verification candidates in one forward pass of (W + G) * (N - 1) tokens, and emits 1..N
// tokens. The output equals plain greedy decoding token for token; these options change only
// how many forward passes it takes. Pass it to Session::generate; std::nullopt there means greedy.
//
// window_size = 0 drops the Jacobi window: a step is the input token plus the pool's candidates
// for it (1 + G * (N - 1) tokens), and the pool is fed only by the prompt and the emitted text
// (seed_from_prompt), a kept or shared pool, or a loaded one. Where wide forward passes are
// costly (a CPU), this verification-only step costs about one greedy step.
struct LookaheadConfig {
    int window_size = 4;            // W: lookahead columns (>= 0); also n-grams harvested per step
    int ngram_size = 4;             // N: n-gram length (>= 2); a step emits at most N tokens
    int verification_set_size = 4;  // G: candidates verified per step (>= 0)
    // Put every n-gram of the prompt and of the accepted text in the pool.
    bool seed_from_prompt = true;
    uint64_t seed = 0;  // seeds the random initial window (drawn from prompt tokens)

    // Draft tree (docs/design.md, "Draft tree"). tree_rows = R > 0: the proposals of every draft
    // source (the pool's G n-grams, suffix lookup, token recycling) are merged into one token
    // tree (shared prefixes once) of at most R rows, those most likely to be accepted, verified
    // beside the window in the same pass; a step then emits 1 .. R + 1 tokens. 0 = the paper's
    // layout: G separate slots of N - 1 tokens.
    int tree_rows = 0;        // R (0 .. 512)
    int suffix_branches = 0;  // suffix lookup: continuations of the longest earlier
                              // matches of the text's suffix in the prompt, the output and
                              // a kept pool's texts (0 .. 16; needs tree_rows >= 1)
    int recycle_top_k = 0;    // token recycling: the k best next tokens the model predicted
                              // for each token, from every step's logits (0 .. 16; needs
                              // tree_rows >= 1)

    bool tree() const { return tree_rows > 0; }
    // Rows of the window: (N - 1) * W, or 1 (x alone) when W = 0.
    int window_rows() const { return window_size == 0 ? 1 : window_size * (ngram_size - 1); }
    // Tokens in one step: window_rows() + R with a tree, else (W + G) * (N - 1), or
    // 1 + G * (N - 1) when W = 0. Meaningful only for valid fields; never throws.
    int tokens_per_step() const {
        if (tree()) return window_rows() + tree_rows;
        return window_size == 0 ? 1 + verification_set_size * (ngram_size - 1)
                                : (window_size + verification_set_size) * (ngram_size - 1);
    }
    // Most tokens one step emits: R + 1 with a tree, else N.
    int max_step_tokens() const { return tree() ? tree_rows + 1 : ngram_size; }

    // Throws ConfigError unless 0 <= window_size <= 64, 2 <= ngram_size <= 64,
    // 0 <= verification_set_size <= 64, 0 <= tree_rows <= 512, 0 <= suffix_branches <= 16,
    // 0 <= recycle_top_k <= 16, suffix_branches and recycle_top_k are 0 without a tree, a step
    // has something to verify (window_size = 0 needs G >= 1, or with a tree any source; a tree
    // needs G, suffix_branches or recycle_top_k >= 1) and tokens_per_step() <= 1024.
    void validate() const;
};

// Automatic lookahead: pass it to Session::generate instead of a LookaheadConfig and the engine
// chooses, and keeps re-choosing, between plain greedy steps and lookahead steps of some
// (W, N, G). The output still equals greedy decoding token for token. The choice maximizes the
// predicted tokens per second from (a) the Session's step-cost table (Session::calibrate,
// measured on first use, refined by the measured step times) and (b) a model of accepted lengths
// that the Session keeps updating from its own generations. Lookahead that ran slower than
// greedy over the last window is dropped for greedy steps, and only re-tried (probed) later when
// the model still predicts a gain. See docs/auto.md.
struct AutoLookahead {
    int replan_interval = 16;     // steps between re-plans (>= 1)
    double min_gain = 0.05;       // lookahead only when its predicted tokens/s beats greedy's by
                                  // this fraction (0 <= min_gain <= 10)
    int max_tokens_per_step = 0;  // cap on (W + G) * (N - 1); 0 = the calibrated range (>= 0)
    int probe_after = 64;         // greedy steps after a fallback before lookahead is tried again;
                                  // doubles after each failed probe, up to 16x (>= 1)
    int probe_steps = 24;         // lookahead steps a fresh config runs before it is judged (>= 1)
    uint64_t seed = 0;            // seeds the random initial window of each lookahead config
    // Verification-only choices (W = 0, N, G) run as a draft tree of at most this many rows: the
    // pool's G n-grams of N plus suffix lookup (4 branches) and token recycling (top 8), each step
    // sized by the step costs (LookaheadConfig::tree_rows). 0 = the classic G slots. Capped at
    // the tokens per step allowed minus 1 (0 .. 512).
    int tree_rows = 32;

    // Throws ConfigError unless the ranges above hold.
    void validate() const;
};

// Options of one Session::generate() call. Every option is per call.
struct GenerationConfig {
    int max_new_tokens = 128;             // stop after this many new tokens (>= 1)
    std::vector<TokenId> stop_token_ids;  // extra end ids, on top of the model's own
    bool use_model_end_ids = true;        // also stop on the model's ModelInfo::eos_token_ids

    // Sampling. temperature 0 is greedy decoding (the other three are then unused). Otherwise
    // the token at absolute position p is drawn from softmax(logits / temperature), cut to the
    // top_k most likely tokens and then to the smallest set whose probability reaches top_p,
    // with the uniform number uniform_at(seed, p) (a counter-based stream): the same seed gives
    // the same tokens with or without lookahead, whatever the steps accepted.
    double temperature = 0.0;  // >= 0, finite
    int top_k = 0;             // keep the k most likely tokens; 0 = all (>= 0)
    double top_p = 1.0;        // nucleus mass, in (0, 1]; 1 = off
    uint64_t seed = 0;         // keys the random stream

    // Context kept from this Session's earlier calls (see docs/session.md):
    // reuse_cache: keep the cached K/V rows of the longest common prefix of `prompt` and the
    //   Session's last sequence (its previous prompt + output), and prefill only the rest. The
    //   rows then come from earlier forward passes, whose floating-point rounding may differ in
    //   the last bits from one prefill of the whole prompt.
    // keep_pool: keep the n-gram pool of earlier calls (and of Session::load_pool or a shared
    //   pool); false starts lookahead from an empty pool (clearing a shared one). The pool also
    //   keeps the texts of its calls (the last 64Ki tokens), from which a run with a larger N
    //   than the pool's rebuilds it; automatic lookahead keeps its replay pools alongside.
    bool reuse_cache = false;
    bool keep_pool = false;

    // Throws ConfigError if max_new_tokens < 1, a stop id is negative, temperature < 0 or not
    // finite, top_k < 0, or top_p is not in (0, 1]. Whether the stop ids are below the model's
    // vocab_size is checked by Session::generate.
    void validate() const;
};

// Where and how a Model runs. Used once, by Model::load.
struct EngineConfig {
    std::string device = "cpu";     // "cpu", "cuda" or "cuda:K"
    std::string dtype = "float32";  // compute dtype: "float32", "bfloat16", "float16" or "float64"
    int num_threads = 0;            // intra-op CPU threads; 0 keeps libtorch's setting. > 0 sets
                                    // libtorch's process-wide count (at::set_num_threads) in load()
    // Kernel of the linear layers (docs/design.md, "Exactness"): "auto" (the first of
    // bf16-avx512, avx2, onednn, generic, aten that this dtype, device and CPU allow and that
    // passes the load-time row-invariance probe; ModelInfo says which and why not the others),
    // or one of those names. A named kernel that cannot run here, or that fails the probe, is a
    // ConfigError at load naming the kernel, the dtype and what the CPU lacks.
    std::string linear_kernel = "auto";
    // Formats of the linear layers (docs/design.md, "Quantized weights"): "auto" (the
    // checkpoint's: dtype for safetensors; for a GGUF file its Q8_0, Q5_0, Q4_0 and Q4_1 weights
    // as they are, other types dequantized to dtype; off the CPU, "none"), "none" (everything in
    // dtype), "int8" (int8 values, one fp32 scale per output column: 1 byte per weight),
    // "int8-g32" (groups of 32 inputs, int8 values, fp16 scales: as GGUF Q8_0, 1.0625 bytes) or
    // "int4" (groups of 32, 4-bit values, fp16 scale and offset: as GGUF Q4_1), quantized at load
    // (GGUF weights already in that format kept as they are; for "int8", Q8_0 and Q5_0 blocks are
    // kept as int8-g32). Activations, norms and embeddings stay in
    // dtype. "w8a8": int8-g32's weights, and each linear layer's input quantized to int8 too, per row
    // and group of 32 at every call (llama.cpp's Q8_0 rule), for integer dot products
    // (AVX512-VNNI, AVX2): faster, and a little further from the float model. Quantized weights
    // run on the CPU, on the avx2 or generic kernel; lookahead stays exact: it equals greedy
    // decoding of the same quantized model.
    std::string quantize = "auto";
    // Whether a quantized model's lm_head is quantized too (else it keeps dtype).
    bool quantize_lm_head = true;
    // Greedy choices through the lm_head screen (docs/design.md, "The lm_head screen"): an int8
    // copy of an fp32 or bf16 lm_head bounds every logit, and only the columns that may still be
    // the argmax are computed exactly, so each step's argmax is the same token, read from fewer
    // bytes. Applies on the CPU with the avx2 and generic kernels (ModelInfo::lm_head_screen);
    // costs 1.06 bytes per lm_head weight. Sampling and full logits are unaffected.
    bool lm_head_screen = true;
    // CUDA only (docs/design.md, "CUDA"): replay the decode step from a CUDA graph captured on a Session's first step (false: run it
    // eagerly, for comparison; same bits).
    bool use_cuda_graphs = true;

    // Throws ConfigError for an unknown dtype, a malformed device, a CUDA device when this
    // libtorch has no usable CUDA, float64 on CUDA, num_threads < 0 or above the machine's CPU
    // count, an unknown linear_kernel or quantize, or quantize on a device other than the CPU.
    void validate() const;
};

// Per-Session options.
struct SessionConfig {
    // KV cache rows (prompt + new tokens + one step); 0 = min(max_position_embeddings, 4096).
    // On the CPU the cache also keeps an fp32 copy for the attention kernel (4 bytes per cached
    // element, touched as rows are written; docs/design.md, "Exactness policy").
    int kv_capacity = 0;
    // CUDA only (docs/design.md, "CUDA"). Every decode step, greedy or lookahead, runs this many
    // rows (the step's tokens, then padding), so that every kernel sees one shape and a token's
    // logits are the same bits in every step: lookahead output == this Session's greedy output.
    // A lookahead configuration may use at most this many tokens per step. 1 .. 1024.
    int cuda_step_rows = 64;

    // Throws ConfigError if kv_capacity < 0 or cuda_step_rows is outside 1 .. 1024. The upper bound (the model's max_position_embeddings,
    // or its sliding window) is checked by the Session constructor.
    void validate() const;
};

}  // namespace pylookahead
