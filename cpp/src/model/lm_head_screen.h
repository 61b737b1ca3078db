// ATen side of the lm_head screen (kernels/argmax_screen.h): the int8 copy of the lm_head and its
// per-column bounds, built once at load, and the exact argmax of a step's rows from them.
// Immutable after build: one screen serves every thread.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "kernels/cpu_isa.h"
#include "pylookahead/types.h"

namespace pylookahead {

class LmHeadScreen {
  public:
    // `dense` [V, K] the lm_head in any float dtype (K a multiple of 32); `path` the fma_linear
    // path of the exact weights; `round_bf16` whether the model's logits are bf16. Null when a
    // weight is not finite (no bound exists then). Cost: one pass over the weights, split among
    // threads; holds 1.0625 bytes per weight plus 4 per column.
    static std::unique_ptr<LmHeadScreen> build(const at::Tensor& dense, CpuIsa path,
                                               bool round_bf16);

    // The argmax of each row of x W^T, as fma_linear(x, exact, V, {}, path, dtype) then argmax
    // (first index of the maximum) would give it, bit for bit, for the rows marked exact; for
    // the others the argmax of the approximations (rows whose choice may be anything, such as
    // a lookahead window's: cheaper, and nearly always the same token).
    //   x       [R, K] in the model's dtype (the final norm's rows)
    //   exact   the lm_head packed for fma_linear (a float format)
    //   need    [R]: whether row r must be exact
    //   approx  if not null: the screen's fp32 approximations [R, V] (e.g. for top-k drafts)
    // The exact rows the screen cannot decide (kernels/argmax_screen.h) are computed whole, in
    // one call.
    std::vector<TokenId> argmax(const at::Tensor& x, const at::Tensor& exact,
                                const std::vector<bool>& need, at::Tensor* approx) const;

    int64_t bytes() const { return q8_.nbytes() + beta_.nbytes(); }

  private:
    LmHeadScreen() = default;
    at::Tensor q8_;    // [ceil(V/16), K/32, 544] uint8: kQ8 (kernels/quant_format.h)
    at::Tensor beta_;  // [V] fp32: the bound factors of kernels/argmax_screen.h
    int64_t vocab_ = 0;
    CpuIsa path_ = CpuIsa::kGeneric;
    bool round_bf16_ = false;
};

}  // namespace pylookahead
