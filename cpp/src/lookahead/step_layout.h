// The fixed shape of one lookahead step: which token sits in which row, at which position, what
// each row may attend to, and which rows' argmax is read. Built once per LookaheadConfig; every
// step has the same T tokens (unused verification slots are padded), so one CUDA graph fits all.
//
// Rows, with x = the input token at position p (its K/V is not cached yet):
//
//   [x][level 0: W-1][level 1: W] ... [level N-2: W][cand 0: N-1] ... [cand G-1: N-1]
//
// Window cell (level l, column j) is row l*W + j (x is cell (0, 0)) at position p + l + j.
// Candidate c, token k is row (N-1)*W + c*(N-1) + k at position p + 1 + k.
// Attention within the step (every row also sees the whole committed cache):
//   - row 0 (x and level 0) is causal among itself;
//   - cell (l >= 1, j) sees row-0 columns 0..j and cells (1..l, j) of its own column, so its
//     context is exactly the contiguous positions p .. p+l+j;
//   - candidate token (c, k) sees x and (c, 0..k). Branches and candidates never see each other.
// Argmax is read at x (t0: the next token), at the last level (the new guesses, one per column)
// and at every verification row; levels 0..N-3 are computed for their K/V only.
//
// W=5, N=4, G=2: T = (5 + 2) * 3 = 21. a = level 0, b = level 1, c = level 2 (last), u and v =
// candidates. `out` marks rows in out_rows.
//
//                keys: x a1 a2 a3 a4 b0 b1 b2 b3 b4 c0 c1 c2 c3 c4 u1 u2 u3 v1 v2 v3
//   row query pos out
//    0   x     p   *   1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .
//    1   a1    p+1     1  1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .
//    2   a2    p+2     1  1  1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .
//    3   a3    p+3     1  1  1  1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .
//    4   a4    p+4     1  1  1  1  1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .
//    5   b0    p+1     1  .  .  .  .  1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .
//    6   b1    p+2     1  1  .  .  .  .  1  .  .  .  .  .  .  .  .  .  .  .  .  .  .
//    7   b2    p+3     1  1  1  .  .  .  .  1  .  .  .  .  .  .  .  .  .  .  .  .  .
//    8   b3    p+4     1  1  1  1  .  .  .  .  1  .  .  .  .  .  .  .  .  .  .  .  .
//    9   b4    p+5     1  1  1  1  1  .  .  .  .  1  .  .  .  .  .  .  .  .  .  .  .
//   10   c0    p+2 *   1  .  .  .  .  1  .  .  .  .  1  .  .  .  .  .  .  .  .  .  .
//   11   c1    p+3 *   1  1  .  .  .  .  1  .  .  .  .  1  .  .  .  .  .  .  .  .  .
//   12   c2    p+4 *   1  1  1  .  .  .  .  1  .  .  .  .  1  .  .  .  .  .  .  .  .
//   13   c3    p+5 *   1  1  1  1  .  .  .  .  1  .  .  .  .  1  .  .  .  .  .  .  .
//   14   c4    p+6 *   1  1  1  1  1  .  .  .  .  1  .  .  .  .  1  .  .  .  .  .  .
//   15   u1    p+1 *   1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  1  .  .  .  .  .
//   16   u2    p+2 *   1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  1  1  .  .  .  .
//   17   u3    p+3 *   1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  1  1  1  .  .  .
//   18   v1    p+1 *   1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  1  .  .
//   19   v2    p+2 *   1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  1  1  .
//   20   v3    p+3 *   1  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  .  1  1  1
//
// For N = 2 the last level is row 0 itself (x and level 0), so out_rows starts 0..W-1.
//
// W = 0 (verification only) has no window: row 0 is x at p, seeing itself, and the candidates
// start at row 1, T = 1 + G * (N - 1); out_rows = 0, then every verification row.
#pragma once

#include <cstdint>
#include <vector>

#include "pylookahead/config.h"

namespace pylookahead {

// Sizes and row offsets of one step, from W, N, G.
struct StepBudget {
    int window_size = 0;            // W
    int ngram_size = 0;             // N
    int verification_set_size = 0;  // G
    int tokens_per_step = 0;        // T = (W + G) * (N - 1), or 1 + G * (N - 1) when W = 0
                                    // (LookaheadConfig::tokens_per_step: with a tree, window + R)
    int last_level_begin = 0;       // first row of level N-2: (N - 2) * W
    int verify_begin = 0;           // first verification row: (N - 1) * W (1 when W = 0)
    int max_accept = 0;             // most tokens one step emits: N (N - 1 accepted + bonus);
                                    // with a tree R + 1

    int candidate_len() const { return ngram_size - 1; }
    // Row of window cell (level, column); cell (0, 0) is x.
    int window_row(int level, int column) const { return level * window_size + column; }
    // Row of token k of verification slot c.
    int verify_row(int c, int k) const { return verify_begin + c * candidate_len() + k; }
};

// Does not validate: call config.validate() first.
StepBudget step_budget(const LookaheadConfig& config);

// The static part of every step (see the diagram above).
struct StepLayout {
    StepBudget budget;
    std::vector<int32_t> offsets;     // [T] position of each row minus p
    std::vector<uint8_t> mask;        // [T * T] row-major, mask[q * T + k] = 1 iff row q sees row k
    std::vector<int32_t> out_rows;    // [R] rows whose argmax is read, ascending
    int out_last_level = 0;           // index in out_rows of last-level column 0 (0 when N = 2;
                                      // W = 0: 1, an empty range)
    int out_verify = 0;               // index in out_rows of the first verification row
    std::vector<int32_t> exact_rows;  // [1 + G(N-1)] row 0 and the verification rows: the rows
                                      // that may be committed or decide acceptance
};

StepLayout build_step_layout(const StepBudget& budget);

// The budget of the window alone: `budget` with G = 0 and T = verify_begin.
StepBudget window_budget(const StepBudget& budget);

}  // namespace pylookahead
