// Which out rows verification reads (lookahead/row_reads.h): against verify_tree itself over
// random trees and windows. A step whose skipped rows hold -1 must give the verdict of a step
// with every row computed, and rows are skipped.
#include "lookahead/row_reads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "lookahead/step_plan.h"
#include "lookahead/token_tree.h"

namespace pylookahead {
namespace {

using Rows = std::vector<int32_t>;
using Tokens = std::vector<TokenId>;

TreeNode node(TokenId t, int parent, int depth) {
    TreeNode v;
    v.token = t;
    v.parent = parent;
    v.depth = depth;
    return v;
}

// The drawing in step_plan.h: x, then the trie {a -> (b, c -> e), d} and one padding row.
StepPlan golden_plan() {
    StepBudget b;
    b.ngram_size = 3;
    b.tokens_per_step = 1;
    b.verify_begin = 1;
    std::vector<TreeNode> nodes = {node(1, -1, 1), node(2, 0, 2), node(3, 0, 2), node(4, -1, 1),
                                   node(5, 2, 3)};
    StepPlan plan;
    build_step_plan(build_step_layout(b), {}, 9, std::move(nodes), 6, &plan);
    return plan;
}

Tokens out_tokens(const StepPlan& plan) {
    Tokens t;
    for (int32_t r : plan.out_rows) t.push_back(plan.tokens[r]);
    return t;
}

TEST(RowReads, GoldenTrie) {
    const StepPlan plan = golden_plan();
    // rows: x a b c d e pad; a and d are children of x, b and c of a, e of c.
    EXPECT_EQ(plan.out_parent, (Rows{-1, 0, 1, 1, 0, 3, 0}));
    Rows first, second;
    first_pass_rows(plan.out_parent, &first);
    EXPECT_EQ(first, (Rows{0}));
    // x chose a (1): a's subtree is the second pass; d and the padding row are never read.
    second_pass_rows(plan.out_parent, out_tokens(plan), Tokens{1, -1, -1, -1, -1, -1, -1}, &second);
    EXPECT_EQ(second, (Rows{1, 2, 3, 5}));
    // x chose d (4): d alone.
    second_pass_rows(plan.out_parent, out_tokens(plan), Tokens{4, -1, -1, -1, -1, -1, -1}, &second);
    EXPECT_EQ(second, (Rows{4}));
    // x chose a token no child holds: no second pass.
    second_pass_rows(plan.out_parent, out_tokens(plan), Tokens{7, -1, -1, -1, -1, -1, -1}, &second);
    EXPECT_TRUE(second.empty());
}

TEST(RowReads, WindowRowsAreAlwaysRead) {
    // W = 2, N = 3, two chains of two tokens: row 0 and the window's last level are out rows.
    LookaheadConfig c;
    c.window_size = 2;
    c.ngram_size = 3;
    c.verification_set_size = 2;
    const StepBudget b = step_budget(c);
    std::vector<TreeNode> nodes = {node(10, -1, 1), node(11, 0, 2), node(12, -1, 1),
                                   node(13, 2, 2)};
    StepPlan plan;
    build_step_plan(build_step_layout(window_budget(b)), Tokens(4, 7), 1, std::move(nodes), 4,
                    &plan);
    ASSERT_EQ(plan.out_tree, 3);
    EXPECT_EQ(plan.out_parent, (Rows{-1, -1, -1, 0, 3, 0, 5}));
    Rows first;
    first_pass_rows(plan.out_parent, &first);
    EXPECT_EQ(first, (Rows{0, 1, 2}));
}

TEST(RowReads, RejectsAParentAfterItsRow) {
    Rows rows;
    EXPECT_THROW(first_pass_rows(Rows{-1, 1}, &rows), std::exception);
    EXPECT_THROW(second_pass_rows(Rows{-1, 0}, Tokens{1}, Tokens{1, 1}, &rows), std::exception);
}

// Random tries and classic chains (whose first tokens may repeat) under a random window: the
// verdict from the two passes' rows alone (-1 elsewhere) equals the verdict from every row, and
// every row of an accepted node was computed.
TEST(RowReads, TwoPassesGiveEveryVerdictOfAllRows) {
    std::mt19937 rng(7);
    int64_t skipped = 0, rows_total = 0, accepted_steps = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        const int vocab = 2 + static_cast<int>(rng() % 3);  // few tokens: many matches
        const int n = 1 + static_cast<int>(rng() % 12);
        const bool classic = trial % 3 == 0;
        std::vector<TreeNode> nodes;
        for (int i = 0; i < n; ++i) {
            const int have = static_cast<int>(nodes.size());
            int parent = -1;
            if (classic) {
                parent = i % 3 == 0 ? -1 : i - 1;
            } else if (have > 0 && rng() % 3 != 0) {
                parent = static_cast<int>(rng() % have);
            }
            TokenId t = static_cast<TokenId>(rng() % vocab);
            if (!classic) {  // a trie: siblings hold distinct tokens
                bool clash = true;
                for (int tries = 0; clash && tries < 8; ++tries) {
                    clash = false;
                    for (const TreeNode& s : nodes)
                        clash = clash || (s.parent == parent && s.token == t);
                    if (clash) t = static_cast<TokenId>(rng() % (vocab + 4));
                }
                if (clash) continue;
            }
            nodes.push_back(node(t, parent, parent < 0 ? 1 : nodes[parent].depth + 1));
        }
        LookaheadConfig c;
        c.window_size = static_cast<int>(rng() % 3);
        c.ngram_size = 2 + static_cast<int>(rng() % 3);
        c.verification_set_size = 1;
        const StepLayout window = build_step_layout(window_budget(step_budget(c)));
        const int cells = window.budget.verify_begin;
        const int m = static_cast<int>(nodes.size());
        StepPlan plan;
        build_step_plan(window, Tokens(cells, 1), 0, std::move(nodes),
                        m + static_cast<int>(rng() % 2), &plan);
        const int R = static_cast<int>(plan.out_rows.size());
        Tokens all(R);
        for (TokenId& t : all) t = static_cast<TokenId>(rng() % vocab);
        Rows first, second;
        first_pass_rows(plan.out_parent, &first);
        second_pass_rows(plan.out_parent, out_tokens(plan), all, &second);
        Tokens lazy(R, -1);
        for (int32_t r : first) lazy[r] = all[r];
        for (int32_t r : second) lazy[r] = all[r];
        const TreeVerdict want = verify_tree(all[0], plan.nodes, all.data() + plan.out_tree);
        const TreeVerdict got = verify_tree(lazy[0], plan.nodes, lazy.data() + plan.out_tree);
        ASSERT_EQ(got.path, want.path) << "trial " << trial;
        ASSERT_EQ(got.emitted, want.emitted) << "trial " << trial;
        for (int32_t v : want.path) ASSERT_GE(lazy[plan.out_tree + v], 0) << "trial " << trial;
        // The window's rows (the Jacobi update reads them all) are always computed.
        for (int i = 0; i < plan.out_tree; ++i) ASSERT_EQ(lazy[i], all[i]) << "trial " << trial;
        skipped += std::count(lazy.begin(), lazy.end(), TokenId{-1});
        rows_total += R;
        accepted_steps += !want.path.empty();
    }
    EXPECT_GT(accepted_steps, 500);  // the cases that need a second pass are covered
    EXPECT_GT(skipped, rows_total / 5);
}

}  // namespace
}  // namespace pylookahead
