// The rows of one lookahead step, built per step (std-only): the Jacobi window of the config
// (its fixed StepLayout, drawn in step_layout.h) followed by the draft tree, one row per node,
// then padding rows up to a fixed count when the model wants fixed shapes (CUDA graphs).
//
//   [x + window: verify_begin rows][tree node 0 .. n-1][padding]
//
// Tree node v (TreeNode: token, parent, depth) sits at row tree_begin + v and position p + depth;
// it sees x (row 0), its ancestors and itself, so its context is the text followed by its root
// path. With the classic layout (LookaheadConfig::tree_rows = 0) the tree is G separate chains of
// N-1 tokens and the plan of a step with all G candidates equals build_step_layout's.
// A padding row holds x at position p + 1 and sees x and itself; its outputs are never read.
//
// W = 0, R = 6, fixed shapes: x, then the trie {a -> (b, c -> e), d} and one padding row. Every
// tree row's argmax is read (`out`); it predicts the token after its node.
//
//                keys: x  a  b  c  d  e  pad
//   row query pos out
//    0   x     p   *   1  .  .  .  .  .  .
//    1   a     p+1 *   1  1  .  .  .  .  .
//    2   b     p+2 *   1  1  1  .  .  .  .
//    3   c     p+2 *   1  1  .  1  .  .  .
//    4   d     p+1 *   1  .  .  .  1  .  .
//    5   e     p+3 *   1  1  .  1  .  1  .
//    6   pad   p+1 *   1  .  .  .  .  .  1
#pragma once

#include <cstdint>
#include <vector>

#include "lookahead/step_layout.h"
#include "lookahead/token_tree.h"
#include "pylookahead/types.h"

namespace pylookahead {

struct StepPlan {
    std::vector<TokenId> tokens;      // [T]
    std::vector<int32_t> offsets;     // [T] position of each row minus p
    std::vector<uint8_t> mask;        // [T * T] row-major, mask[q * T + k] = 1 iff q sees k
    std::vector<int32_t> out_rows;    // ascending: the window's (row 0, last level), then every
                                      // tree and padding row
    std::vector<int32_t> exact_rows;  // row 0, then every tree and padding row
    std::vector<int32_t> out_parent;  // [R] per out row: -1 (row 0, window rows: always read)
                                      // or the out row of its node's parent (row 0 for the
                                      // root's children; padding rows too): row_reads.h
    int out_last_level = 0;           // index in out_rows of last-level column 0 (as StepLayout)
    int out_tree = 0;                 // index in out_rows of the first tree row
    int tree_begin = 0;               // row of tree node 0
    std::vector<TreeNode> nodes;      // [n] the tree (parents before children)

    int rows() const { return static_cast<int>(tokens.size()); }
};

// window: the layout of the window alone (a budget with G = 0), cells: the window's tokens
// (JacobiWindow::cells(), empty when W = 0; cell 0 is replaced by x), nodes: the tree (moved in), pad_to: rows
// of tree + padding (>= nodes.size()). Reuses plan's storage.
void build_step_plan(const StepLayout& window, const std::vector<TokenId>& cells, TokenId x,
                     std::vector<TreeNode>&& nodes, int pad_to, StepPlan* plan);

}  // namespace pylookahead
