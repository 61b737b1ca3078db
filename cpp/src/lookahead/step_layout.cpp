#include "lookahead/step_layout.h"

namespace pylookahead {

StepBudget step_budget(const LookaheadConfig& config) {
    StepBudget b;
    b.window_size = config.window_size;
    b.ngram_size = config.ngram_size;
    b.verification_set_size = config.verification_set_size;
    b.tokens_per_step = config.tokens_per_step();
    b.last_level_begin = (b.ngram_size - 2) * b.window_size;
    // W = 0: row 0 (x) alone, then the candidates.
    b.verify_begin = b.window_size == 0 ? 1 : (b.ngram_size - 1) * b.window_size;
    b.max_accept = config.max_step_tokens();
    return b;
}

StepBudget window_budget(const StepBudget& budget) {
    StepBudget b = budget;
    b.verification_set_size = 0;
    b.tokens_per_step = b.verify_begin;
    return b;
}

StepLayout build_step_layout(const StepBudget& b) {
    const int T = b.tokens_per_step, W = b.window_size, len = b.candidate_len();
    StepLayout layout;
    layout.budget = b;
    layout.offsets.assign(T, 0);
    layout.mask.assign(static_cast<size_t>(T) * T, 0);
    auto see = [&](int q, int k) { layout.mask[static_cast<size_t>(q) * T + k] = 1; };
    see(0, 0);  // x; with W >= 1 also cell (0, 0) of the window

    for (int level = 0; level < b.ngram_size - 1; ++level) {
        for (int j = 0; j < W; ++j) {
            const int row = b.window_row(level, j);
            layout.offsets[row] = level + j;
            for (int i = 0; i <= j; ++i) see(row, b.window_row(0, i));      // row-0 prefix
            for (int l = 1; l <= level; ++l) see(row, b.window_row(l, j));  // own column
        }
    }
    for (int c = 0; c < b.verification_set_size; ++c) {
        for (int k = 0; k < len; ++k) {
            const int row = b.verify_row(c, k);
            layout.offsets[row] = 1 + k;
            see(row, 0);
            for (int i = 0; i <= k; ++i) see(row, b.verify_row(c, i));
        }
    }

    if (b.ngram_size > 2 || W == 0) layout.out_rows.push_back(0);
    layout.out_last_level = static_cast<int>(layout.out_rows.size());
    for (int j = 0; j < W; ++j) layout.out_rows.push_back(b.last_level_begin + j);
    layout.out_verify = static_cast<int>(layout.out_rows.size());
    for (int row = b.verify_begin; row < T; ++row) layout.out_rows.push_back(row);
    layout.exact_rows.push_back(0);
    for (int row = b.verify_begin; row < T; ++row) layout.exact_rows.push_back(row);
    return layout;
}

}  // namespace pylookahead
