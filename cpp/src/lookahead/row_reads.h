// Which out rows of a lookahead step verification reads, std-only, so that a model can compute
// the lm_head for those rows only (StepModel::forward_step's `out_parent`).
//
// out_parent [R], per out row i of a step:
//   -1      its choice is always read (row 0 and the Jacobi window's rows);
//   j < i   its choice is read only if out row j's choice equals row i's own token and row j is
//           read: row j is the row of i's tree parent (row 0 for a child of the root).
// verify_tree (token_tree.h) reads a tree row only when its node is accepted, and a node is
// accepted only when its parent is and its token is the parent's choice: exactly these rules.
//
// Two lm_head passes cover every row that is read, whatever the outcome:
//   pass 1: the rows with out_parent -1;
//   pass 2: each row whose parent is a pass-1 row that chose the row's token, and every row
//           below such a row (their own choices are not known before the pass).
// A row in neither pass is never read. On a CPU a pass of R rows costs about R passes of one
// once the lm_head is compute-bound, so a step whose drafts fail pays for row 0 alone, and one
// that accepts pays for the matched subtree, not for every draft.
#pragma once

#include <cstdint>
#include <vector>

#include "pylookahead/types.h"

namespace pylookahead {

// The rows of pass 1, ascending. Checks out_parent[i] < i.
void first_pass_rows(const std::vector<int32_t>& out_parent, std::vector<int32_t>* rows);

// The rows of pass 2, ascending. row_token [R]: the token at each out row; choice [R]: the
// choices of the pass-1 rows (other entries are not read).
void second_pass_rows(const std::vector<int32_t>& out_parent, const std::vector<TokenId>& row_token,
                      const std::vector<TokenId>& choice, std::vector<int32_t>* rows);

}  // namespace pylookahead
