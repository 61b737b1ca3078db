#include "model/lm_head_screen.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>

#include "check.h"

#include "kernels/argmax_screen.h"
#include "kernels/quant_format.h"
#include "model/fma_linear_op.h"

namespace pylookahead {

namespace {

// Columns packed per task at load (a multiple of kQuantBlock): bounds the fp32 copy a task makes.
constexpr int64_t kPackColumns = 1024;

}  // namespace

std::unique_ptr<LmHeadScreen> LmHeadScreen::build(const at::Tensor& dense, CpuIsa path,
                                                  bool round_bf16) {
    const int64_t n = dense.size(0), k = dense.size(1);
    std::unique_ptr<LmHeadScreen> s(new LmHeadScreen());
    s->vocab_ = n;
    s->path_ = path;
    s->round_bf16_ = round_bf16;
    const int64_t group_bytes = quant_group_bytes(WeightFormat::kQ8);
    s->q8_ = at::empty({(n + kQuantBlock - 1) / kQuantBlock, k / kQuantGroup, group_bytes},
                       at::TensorOptions().dtype(at::kByte));
    s->beta_ = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
    auto* q8 = s->q8_.data_ptr<uint8_t>();
    float* beta = s->beta_.data_ptr<float>();
    std::atomic<bool> finite{true};
    const int64_t chunks = (n + kPackColumns - 1) / kPackColumns;
    at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
            const int64_t col = c * kPackColumns, cols = std::min(kPackColumns, n - col);
            const at::Tensor w = dense.narrow(0, col, cols).to(at::kFloat).contiguous();
            unsigned char* out = q8 + (col / kQuantBlock) * (k / kQuantGroup) * group_bytes;
            if (!argmax_screen_pack(w.data_ptr<float>(), cols, k, out, beta + col)) finite = false;
        }
    });
    if (!finite) return nullptr;
    return s;
}

std::vector<TokenId> LmHeadScreen::argmax(const at::Tensor& x, const at::Tensor& exact,
                                          const std::vector<bool>& need, at::Tensor* approx) const {
    const int64_t rows = x.size(0), k = x.size(1);
    // What fma_linear reads: the rows widened to fp32 (exact).
    const at::Tensor xf = x.to(at::kFloat).contiguous();
    const at::Tensor a = fma_linear(xf, q8_, vocab_, {}, path_, at::kFloat);  // [R, V]
    const WeightFormat format = fma_linear_format(exact);
    const float* xp = xf.data_ptr<float>();
    const float* ap = a.data_ptr<float>();
    const float* beta = beta_.data_ptr<float>();
    PYLA_CHECK(static_cast<int64_t>(need.size()) == rows,
               "LmHeadScreen::argmax: need has " << need.size() << " rows, x " << rows);
    std::vector<TokenId> ids(rows, -1);
    // Rows in parallel: each one is two passes over V and a few exact blocks.
    at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
        std::vector<float> scratch;
        for (int64_t r = r0; r < r1; ++r) {
            const float* ar = ap + r * vocab_;
            if (!need[r]) {
                ids[r] = static_cast<TokenId>(std::max_element(ar, ar + vocab_) - ar);
                continue;
            }
            scratch.resize(vocab_);
            ids[r] = argmax_screen_pick(path_, format, exact.data_ptr(), vocab_, k, xp + r * k, ar,
                                        beta, round_bf16_, vocab_ / 16, scratch.data(), nullptr);
        }
    });
    // The exact rows left undecided: whole rows, as the unscreened path computes them.
    std::vector<int64_t> undecided;
    for (int64_t r = 0; r < rows; ++r) {
        if (ids[r] < 0) undecided.push_back(r);
    }
    if (!undecided.empty()) {
        const at::Tensor idx = at::tensor(undecided, at::TensorOptions().dtype(at::kLong));
        const at::ScalarType out = round_bf16_ ? at::kBFloat16 : at::kFloat;
        const at::Tensor logits =
            fma_linear(xf.index_select(0, idx), exact, vocab_, {}, path_, out).to(at::kFloat);
        const at::Tensor best = logits.argmax(-1).contiguous();
        for (size_t i = 0; i < undecided.size(); ++i)
            ids[undecided[i]] = static_cast<TokenId>(best[i].item<int64_t>());
    }
    if (approx) *approx = a;
    return ids;
}

}  // namespace pylookahead
