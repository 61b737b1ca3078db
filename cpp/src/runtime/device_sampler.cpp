#include "runtime/device_sampler.h"

#include <limits>

namespace pylookahead {

at::Tensor sample_rows(const at::Tensor& logits, const at::Tensor& uniforms, double temperature,
                       int top_k, double top_p) {
    const int64_t vocab = logits.size(1);
    const at::Tensor l = logits.to(at::kDouble);
    const at::Tensor nan = l.isnan();
    // The first largest non-NaN logit.
    const at::Tensor best =
        l.masked_fill(nan, -std::numeric_limits<double>::infinity()).argmax(-1, true);  // [R, 1]
    const at::Tensor max_logit = l.gather(1, best);
    at::Tensor w = ((l - max_logit) * (1.0 / temperature)).exp();
    w = w.masked_fill(w.isnan(), 0.0);  // NaN logits (and an all -inf row) are never drawn

    const at::Tensor rank = at::arange(vocab, l.options().dtype(at::kLong));  // [V]
    const bool use_k = top_k > 0 && top_k < vocab, use_p = top_p < 1.0;
    at::Tensor order;  // [R, V] ids in draw order; undefined: id order
    if (use_k || use_p) {
        // Mass top-p is measured against: the top-k set's (summed in descending order), else the
        // whole row's in id order (as TokenSampler sums it).
        const at::Tensor whole = use_k ? at::Tensor() : w.cumsum(-1).narrow(1, vocab - 1, 1);
        auto sorted = w.sort(/*stable=*/true, /*dim=*/-1, /*descending=*/true);
        w = std::get<0>(sorted);
        order = std::get<1>(sorted);
        if (use_k) w = w.masked_fill(rank >= top_k, 0.0);
        if (use_p) {
            const at::Tensor mass = w.cumsum(-1);
            const at::Tensor total = use_k ? mass.narrow(1, top_k - 1, 1) : whole;
            // Kept: up to and including the first token whose running mass reaches top_p.
            at::Tensor kept = (mass < total * top_p).sum(-1, true) + 1;  // [R, 1]
            if (use_k) kept = kept.clamp_max(top_k);
            w = w.masked_fill(rank.unsqueeze(0) >= kept, 0.0);
        }
    }
    const at::Tensor running = w.cumsum(-1);
    const at::Tensor target =
        uniforms.to(at::kDouble).unsqueeze(1) * running.narrow(1, vocab - 1, 1);
    at::Tensor pick = (running <= target).sum(-1, true);  // first index whose running sum exceeds
    // Rounding can leave the target at the very end of the mass: the last positive weight then.
    const at::Tensor last = at::where(w > 0, rank.unsqueeze(0), -1).amax(-1, true);
    at::Tensor token = order.defined() ? order.gather(1, pick.clamp_max(vocab - 1)) : pick;
    const at::Tensor fallback =
        at::where(last >= 0, order.defined() ? order.gather(1, last.clamp_min(0)) : last, best);
    token = at::where(pick >= vocab, fallback, token);
    token = at::where(nan.all(-1, true), at::zeros_like(token), token);
    return token.squeeze(1);
}

}  // namespace pylookahead
