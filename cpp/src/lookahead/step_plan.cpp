#include "lookahead/step_plan.h"

#include <algorithm>

#include "check.h"

namespace pylookahead {

void build_step_plan(const StepLayout& window, const std::vector<TokenId>& cells, TokenId x,
                     std::vector<TreeNode>&& nodes, int pad_to, StepPlan* plan) {
    const int wb = window.budget.verify_begin;  // window rows, x included
    const int n = static_cast<int>(nodes.size());
    PYLA_CHECK(pad_to >= n && static_cast<int>(window.offsets.size()) == wb,
               "step plan: " << n << " nodes, pad to " << pad_to << ", window " << wb);
    const int T = wb + pad_to;
    plan->nodes = std::move(nodes);
    plan->tree_begin = wb;
    plan->tokens.resize(T);
    plan->offsets.resize(T);
    // W = 0: no cells, the window is x alone.
    std::copy_n(cells.begin(), std::min(wb, static_cast<int>(cells.size())), plan->tokens.begin());
    plan->tokens[0] = x;
    std::copy(window.offsets.begin(), window.offsets.end(), plan->offsets.begin());
    plan->mask.assign(static_cast<size_t>(T) * T, 0);
    uint8_t* m = plan->mask.data();
    for (int r = 0; r < wb; ++r) {
        std::copy_n(window.mask.data() + static_cast<size_t>(r) * wb, wb,
                    m + static_cast<size_t>(r) * T);
    }
    for (int i = 0; i < pad_to; ++i) {
        const int row = wb + i;
        uint8_t* mr = m + static_cast<size_t>(row) * T;
        mr[0] = 1;
        mr[row] = 1;
        if (i < n) {
            const TreeNode& v = plan->nodes[i];
            plan->tokens[row] = v.token;
            plan->offsets[row] = v.depth;
            for (int a = v.parent; a >= 0; a = plan->nodes[a].parent) mr[wb + a] = 1;
        } else {
            plan->tokens[row] = x;
            plan->offsets[row] = 1;
        }
    }
    plan->out_rows.assign(window.out_rows.begin(), window.out_rows.end());
    plan->out_last_level = window.out_last_level;
    plan->out_tree = static_cast<int>(plan->out_rows.size());
    PYLA_CHECK(!plan->out_rows.empty() && plan->out_rows[0] == 0, "step plan: row 0 not out");
    plan->out_parent.assign(plan->out_rows.size(), -1);
    plan->exact_rows.assign(1, 0);
    for (int row = wb; row < T; ++row) {
        const int i = row - wb;
        const int32_t parent = i < n ? plan->nodes[i].parent : -1;
        plan->out_parent.push_back(parent < 0 ? 0 : plan->out_tree + parent);
        plan->out_rows.push_back(row);
        plan->exact_rows.push_back(row);
    }
}

}  // namespace pylookahead
