#include "runtime/torch_step_model.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#if PYLA_WITH_OPENMP
#include <omp.h>
#endif

#include "check.h"
#include "lookahead/row_reads.h"
#include "pylookahead/errors.h"
#include "runtime/device_sampler.h"

namespace pylookahead {

namespace {

// sample_rows() of logits [R, V] fp32 on their device with `sampler`'s options and the uniform
// numbers u [R]: R token ids, copied to the host.
std::vector<TokenId> draw_on_device(const at::Tensor& logits, std::vector<double> u,
                                    const TokenSampler& sampler) {
    const at::Tensor uniforms =
        at::from_blob(u.data(), {static_cast<int64_t>(u.size())}, at::kDouble).to(logits.device());
    const at::Tensor ids =
        sample_rows(logits, uniforms, sampler.temperature(), sampler.top_k(), sampler.top_p())
            .to(at::kInt)
            .cpu();
    return std::vector<TokenId>(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel());
}

}  // namespace

TorchStepModel::TorchStepModel(const Transformer& model, int capacity,
                               const DeviceStepOptions& device)
    : model_(model),
      min_decode_rows_(model.device().is_cuda() ? 1 : model.min_invariant_rows()),
      scratch_rows_(model.device().is_cuda() ? device.rows : min_decode_rows_),
      kv_(model.config().num_hidden_layers, model.config().num_key_value_heads,
          capacity + scratch_rows_ - 1, model.config().head_dim, model.dtype(), model.device()) {
    if (model.device().is_cuda()) {
#if PYLA_WITH_CUDA
        device_step_ = make_cuda_step(model, kv_, device.rows, device.use_graphs);
#else
        throw ConfigError(
            "device '" + model.device().str() +
            "': this build of pylookahead has no CUDA decode step (it was built against a torch "
            "without CUDA; rebuild it against a CUDA torch)");
#endif
    }
    // PYLOOKAHEAD_GOVERN_THREADS=0 turns the governor off (benchmarks/contention.py compares).
    const char* env = std::getenv("PYLOOKAHEAD_GOVERN_THREADS");
    if (env != nullptr && std::string(env) == "0") govern_threads_ = false;
}

TorchStepModel::StepInputs TorchStepModel::stage_inputs(const std::vector<TokenId>& tokens,
                                                        const std::vector<int32_t>& positions,
                                                        const std::vector<int32_t>& out_rows) {
    const int64_t need = static_cast<int64_t>(std::max(tokens.size(), out_rows.size()));
    if (!host_inputs_.defined() || host_inputs_.size(1) < need) {
        const int64_t cap = std::max<int64_t>(need, 1024);  // every lookahead step fits 1024
        const bool cuda = model_.device().is_cuda();
        host_inputs_ =
            at::empty({3, cap}, at::TensorOptions().dtype(at::kLong).pinned_memory(cuda));
        device_inputs_ =
            cuda ? at::empty({3, cap}, at::TensorOptions().dtype(at::kLong).device(model_.device()))
                 : host_inputs_;
    }
    const int64_t cap = host_inputs_.size(1);
    int64_t* h = host_inputs_.data_ptr<int64_t>();
    const int64_t t = static_cast<int64_t>(tokens.size()),
                  r = static_cast<int64_t>(out_rows.size());
    std::copy(tokens.begin(), tokens.end(), h);
    std::copy(positions.begin(), positions.end(), h + cap);
    std::copy(out_rows.begin(), out_rows.end(), h + 2 * cap);
    if (!device_inputs_.is_same(host_inputs_)) {
        // Only the columns in use. The previous step's copy has finished: its argmax was read
        // back on the host since.
        device_inputs_.narrow(1, 0, need)
            .copy_(host_inputs_.narrow(1, 0, need), /*non_blocking=*/true);
    }
    return {device_inputs_.select(0, 0).narrow(0, 0, t),
            device_inputs_.select(0, 1).narrow(0, 0, t),
            device_inputs_.select(0, 2).narrow(0, 0, r)};
}

void TorchStepModel::forward_step(const std::vector<TokenId>& tokens,
                                  const std::vector<int32_t>& positions, const uint8_t* mask,
                                  const std::vector<int32_t>& out_rows,
                                  const std::vector<int32_t>& exact_rows,
                                  const std::vector<int32_t>& out_parent,
                                  std::vector<TokenId>* argmax, TokenSampler* sampler) {
#if PYLA_WITH_OPENMP
    if (govern_threads_ && !exact_rows.empty() && model_.device().is_cpu()) {
        // omp_set_num_threads sets the calling thread's count only (an OpenMP ICV), which is
        // what this thread's parallel regions (ours and ATen's) start with.
        const int full = omp_get_max_threads();
        if (full != governor_.full()) governor_.reset(full);
        const int threads = governor_.next();
        // The thread's own count is back after the step, also when it throws.
        struct Restore {
            int full;
            ~Restore() { omp_set_num_threads(full); }
        } restore{full};
        omp_set_num_threads(threads);
        const auto t0 = std::chrono::steady_clock::now();
        run_step(tokens, positions, mask, out_rows, exact_rows, out_parent, argmax, sampler);
        governor_.record(
            static_cast<int>(tokens.size()),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        return;
    }
#endif
    if (device_step_ && !exact_rows.empty()) {
        run_device_step(tokens, positions, mask, out_rows, argmax, sampler);
        return;
    }
    run_step(tokens, positions, mask, out_rows, exact_rows, out_parent, argmax, sampler);
}

void TorchStepModel::run_device_step(const std::vector<TokenId>& tokens,
                                     const std::vector<int32_t>& positions, const uint8_t* mask,
                                     const std::vector<int32_t>& out_rows,
                                     std::vector<TokenId>* argmax, TokenSampler* sampler) {
    std::vector<TokenId> all;  // argmax of every row of the step
    const at::Tensor logits = device_step_->run(tokens, positions, mask, kv_len_, &all);
    pending_rows_ = static_cast<int>(tokens.size());
    const int rows = device_step_->rows();
    if (sampler != nullptr) {
        // Every row of the step is drawn (one [rows, V] shape for every step, so a row's draw is
        // the same bits in every step); the others' draws (u = 0) are not read.
        std::vector<double> u(rows, 0.0);
        for (int32_t r : out_rows) u[r] = uniform_at(sampler->seed(), int64_t{positions[r]} + 1);
        all = draw_on_device(logits, u, *sampler);
    }
    argmax->resize(out_rows.size());
    for (size_t i = 0; i < out_rows.size(); ++i) (*argmax)[i] = all[out_rows[i]];
    if (successors_k_ > 0) {
        std::vector<int64_t> rows_idx(out_rows.begin(), out_rows.end());
        const at::Tensor idx =
            at::from_blob(rows_idx.data(), {static_cast<int64_t>(rows_idx.size())}, at::kLong)
                .to(logits.device());
        std::vector<TokenId> exact;  // the choices above stand; only the successors are kept
        top_k_rows(logits.index_select(0, idx), static_cast<int>(out_rows.size()), &exact);
    }
}

void TorchStepModel::run_step(const std::vector<TokenId>& tokens,
                              const std::vector<int32_t>& positions, const uint8_t* mask,
                              const std::vector<int32_t>& out_rows,
                              const std::vector<int32_t>& exact_rows,
                              const std::vector<int32_t>& out_parent, std::vector<TokenId>* argmax,
                              TokenSampler* sampler) {
    PYLA_CHECK(!tokens.empty() && positions.size() == tokens.size(), "bad step shapes");
    if (!exact_rows.empty() && static_cast<int>(tokens.size()) < min_decode_rows_) {
        // Pad with rows that repeat row 0 and see only themselves; their outputs are not read
        // and their K/V rows are scratch, never committed.
        const int64_t t0 = static_cast<int64_t>(tokens.size()), tp = min_decode_rows_;
        std::vector<TokenId> ptokens(tokens);
        std::vector<int32_t> ppositions(positions);
        std::vector<uint8_t> pmask(static_cast<size_t>(tp * tp), 0);
        for (int64_t r = 0; r < tp; ++r) {
            for (int64_t c = 0; c < tp; ++c) {
                const bool real = r < t0 && c < t0;
                pmask[r * tp + c] = real ? (mask ? mask[r * t0 + c] : c <= r) : r == c;
            }
        }
        for (int64_t r = t0; r < tp; ++r) {
            ptokens.push_back(tokens[0]);
            ppositions.push_back(positions[0]);
        }
        run_step(ptokens, ppositions, pmask.data(), out_rows, exact_rows, out_parent, argmax,
                 sampler);
        pending_rows_ = static_cast<int>(t0);
        return;
    }
    const int64_t t = static_cast<int64_t>(tokens.size());
    PYLA_CHECK(kv_len_ + t <= kv_.capacity(), "step of " << t << " rows at kv_len " << kv_len_
                                                         << " exceeds KV capacity "
                                                         << kv_.capacity());
    // Decode steps (greedy or lookahead) use the row-invariant attention, so that the exact rows
    // equal a greedy step bit for bit; the GEMMs (from min_decode_rows_ rows on), norms and
    // elementwise kernels already give a row the same bits whatever else is in the batch.
    // Prefill is shared by both modes: SDPA.
    // On the CPU that kernel reads the host mask directly, so the [T, kv_len + T] mask tensor is
    // built only for SDPA (prefill, CUDA).
    const bool row_invariant = !exact_rows.empty();
    std::optional<at::Tensor> full_mask;
    if (mask != nullptr && !(row_invariant && model_.device().is_cpu())) {
        // The step block is the same for every step of one lookahead config: convert it once.
        const size_t n = static_cast<size_t>(t * t);
        if (mask_key_.size() != n || std::memcmp(mask_key_.data(), mask, n) != 0) {
            mask_key_.assign(mask, mask + n);
            at::Tensor host = at::from_blob(mask_key_.data(), {t, t}, at::kByte);
            mask_block_ = host.to(at::TensorOptions().dtype(at::kBool).device(model_.device()));
        }
        auto opts = at::TensorOptions().dtype(at::kBool).device(model_.device());
        at::Tensor m = at::ones({t, kv_len_ + t}, opts);
        m.narrow(1, kv_len_, t).copy_(mask_block_);
        full_mask = m;
    }
    const StepInputs in = stage_inputs(tokens, positions, out_rows);
    const at::Tensor hidden = model_.forward_hidden(in.tokens, in.positions, full_mask, kv_,
                                                    kv_len_, in.out_rows, row_invariant, mask);
    pending_rows_ = static_cast<int>(t);
    std::vector<bool> need(out_rows.size(), exact_rows.empty());
    for (size_t i = 0, j = 0; i < out_rows.size() && !exact_rows.empty(); ++i) {
        while (j < exact_rows.size() && exact_rows[j] < out_rows[i]) ++j;
        need[i] = j < exact_rows.size() && exact_rows[j] == out_rows[i];
    }
    const bool successors = successors_k_ > 0 && row_invariant;
    if (sampler == nullptr && !successors && !out_parent.empty() && min_decode_rows_ == 1) {
        // Only the rows verification reads. (Recycling learns from every row's top k, those of
        // rejected drafts included: it keeps the single pass.)
        PYLA_CHECK(out_parent.size() == out_rows.size(),
                   "out_parent has " << out_parent.size() << " rows, out_rows " << out_rows.size());
        row_token_.resize(out_rows.size());
        for (size_t i = 0; i < out_rows.size(); ++i) row_token_[i] = tokens[out_rows[i]];
        choose_read_rows(hidden, need, row_token_, out_parent, argmax);
        return;
    }
    if (sampler == nullptr && model_.lm_head_screen()) {
        // Greedy choices through the lm_head screen: for exact rows (every row of a prefill) the
        // same ids as the argmax below; for the others (free by contract: window rows) the argmax
        // of its approximations. Recycled successors, drafts only, from the approximations too.
        at::Tensor approx;
        *argmax = model_.lm_head_argmax(hidden, need, successors ? &approx : nullptr);
        if (successors) {
            std::vector<TokenId> unused;
            top_k_rows(approx, static_cast<int>(out_rows.size()), &unused);
        }
        return;
    }
    at::Tensor logits = model_.lm_head_logits(hidden);
    if (sampler != nullptr && model_.device().is_cuda()) {
        // A prefill's draw on the device too: R ids come back, not R x V logits.
        std::vector<double> u(out_rows.size());
        for (size_t r = 0; r < out_rows.size(); ++r)
            u[r] = uniform_at(sampler->seed(), int64_t{positions[out_rows[r]]} + 1);
        *argmax = draw_on_device(logits.to(at::kFloat), u, *sampler);
        return;
    }
    if (sampler != nullptr) {
        // Sampling draws on the host from the R rows' fp32 logits.
        at::Tensor host = logits.to(at::kFloat).cpu().contiguous();
        const int vocab = static_cast<int>(host.size(1));
        const float* data = host.data_ptr<float>();
        argmax->resize(out_rows.size());
        for (size_t r = 0; r < out_rows.size(); ++r) {
            (*argmax)[r] = sampler->sample(data + r * static_cast<size_t>(vocab), vocab,
                                           static_cast<int64_t>(positions[out_rows[r]]) + 1);
        }
        if (successors_k_ > 0 && row_invariant) {
            std::vector<TokenId> unused;  // the sampled tokens stand; only the successors are kept
            top_k_rows(host, static_cast<int>(out_rows.size()), &unused);
        }
        return;
    }
    // argmax over fp32 (ties still go to the first index) is several times faster on CPU than
    // over bf16.
    at::Tensor scores = logits.to(at::kFloat);
    if (successors_k_ > 0 && row_invariant) {
        top_k_rows(scores, static_cast<int>(out_rows.size()), argmax);
        return;
    }
    // The only device-to-host copy of the step: R int32 ids.
    at::Tensor ids = scores.argmax(-1).to(at::kInt).cpu().contiguous();
    argmax->assign(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel());
}

void TorchStepModel::choose_read_rows(const at::Tensor& hidden, const std::vector<bool>& need,
                                      const std::vector<TokenId>& row_token,
                                      const std::vector<int32_t>& out_parent,
                                      std::vector<TokenId>* argmax) {
    argmax->assign(out_parent.size(), -1);
    auto pass = [&](const std::vector<int32_t>& rows) {
        if (rows.empty()) return;
        std::vector<int64_t> idx(rows.begin(), rows.end());
        const at::Tensor h = hidden.index_select(
            0, at::tensor(idx, at::TensorOptions().dtype(at::kLong)).to(hidden.device()));
        std::vector<TokenId> ids;
        if (model_.lm_head_screen()) {
            std::vector<bool> sub(rows.size());
            for (size_t i = 0; i < rows.size(); ++i) sub[i] = need[rows[i]];
            ids = model_.lm_head_argmax(h, sub, nullptr);
        } else {
            const at::Tensor best =
                model_.lm_head_logits(h).to(at::kFloat).argmax(-1).to(at::kInt).cpu().contiguous();
            ids.assign(best.data_ptr<int32_t>(), best.data_ptr<int32_t>() + best.numel());
        }
        for (size_t i = 0; i < rows.size(); ++i) (*argmax)[rows[i]] = ids[i];
    };
    first_pass_rows(out_parent, &pass_rows_);
    pass(pass_rows_);
    second_pass_rows(out_parent, row_token, *argmax, &pass_rows_);
    pass(pass_rows_);
}

void TorchStepModel::top_k_rows(const at::Tensor& scores, int rows, std::vector<TokenId>* argmax) {
    const int64_t k = std::min<int64_t>(successors_k_, scores.size(-1));
    auto [values, indices] = scores.topk(k, -1);
    const at::Tensor v = values.cpu().contiguous();
    const at::Tensor ids = indices.to(at::kInt).cpu().contiguous();
    const float* vd = v.data_ptr<float>();
    const int32_t* id = ids.data_ptr<int32_t>();
    successors_.assign(static_cast<size_t>(rows) * successors_k_, -1);
    argmax->resize(rows);
    for (int r = 0; r < rows; ++r) {
        const float* rv = vd + r * k;
        const int32_t* ri = id + r * k;
        std::copy_n(ri, k, successors_.begin() + static_cast<size_t>(r) * successors_k_);
        // The exact argmax (first index of the maximum) from the top k: every entry equal to the
        // maximum is among them when the k-th value is smaller; else (a k-way tie, or NaN) the
        // row's own argmax decides.
        if (k >= 2 && rv[k - 1] < rv[0]) {
            int32_t best = ri[0];
            for (int64_t j = 1; j < k && rv[j] == rv[0]; ++j) best = std::min(best, ri[j]);
            (*argmax)[r] = best;
        } else {
            (*argmax)[r] = static_cast<TokenId>(scores[r].argmax().item<int64_t>());
        }
    }
}

void TorchStepModel::truncate(int rows) {
    PYLA_CHECK(rows >= 0 && rows <= kv_len_, "truncate to " << rows << " rows of " << kv_len_);
    kv_len_ = rows;
    pending_rows_ = 0;
}

void TorchStepModel::commit(const std::vector<int32_t>& src_rows) {
    for (size_t i = 0; i < src_rows.size(); ++i) {
        const int32_t src = src_rows[i];
        PYLA_CHECK(
            src >= static_cast<int32_t>(i) && src < pending_rows_,
            "commit row " << src << " at index " << i << " of a " << pending_rows_ << "-row step");
        kv_.move_row(kv_len_ + src, kv_len_ + static_cast<int64_t>(i));
    }
    kv_len_ += static_cast<int>(src_rows.size());
    pending_rows_ = 0;
}

at::Tensor TorchStepModel::prefill_logits(const std::vector<TokenId>& tokens) {
    std::vector<int32_t> positions(tokens.size()), rows(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) positions[i] = rows[i] = static_cast<int32_t>(i);
    kv_len_ = 0;
    const StepInputs in = stage_inputs(tokens, positions, rows);
    at::Tensor logits = model_.forward(in.tokens, in.positions, std::nullopt, kv_, 0, in.out_rows);
    return logits.to(at::kFloat).cpu();
}

}  // namespace pylookahead
