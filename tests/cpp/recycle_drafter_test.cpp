// Token recycling: the successor table, the tree a lookup grows from it (from the root and from
// the other sources' drafts), and the table's life on the SharedPool (kept with the pool, emptied
// with it).
#include <gtest/gtest.h>

#include <ostream>
#include <vector>

#include "lookahead/draft_scorer.h"
#include "lookahead/recycle_drafter.h"
#include "lookahead/shared_pool.h"
#include "lookahead/successor_table.h"
#include "lookahead/token_tree.h"

namespace pylookahead {
namespace {

using Tokens = std::vector<TokenId>;

TEST(SuccessorTable, LaterRowsWinAndUnknownTokensHaveNone) {
    SuccessorTable t;
    t.reset(2);
    const Tokens tokens{5, 3, 5, -1}, succ{7, 8, 1, -1, 9, 7, 4, 4};
    t.update(tokens.data(), succ.data(), 4);
    EXPECT_EQ(t.tokens_known(), 2);
    ASSERT_NE(t.find(5), nullptr);
    EXPECT_EQ(Tokens(t.find(5), t.find(5) + 2), (Tokens{9, 7}));  // the later row of 5
    EXPECT_EQ(Tokens(t.find(3), t.find(3) + 2), (Tokens{1, -1}));
    EXPECT_EQ(t.find(4), nullptr);
    EXPECT_EQ(t.find(100), nullptr);
    EXPECT_EQ(t.find(-1), nullptr);
    t.reset(2);
    EXPECT_EQ(t.find(5), nullptr);
    EXPECT_EQ(t.tokens_known(), 0);
}

struct Proposal {
    TokenId token;
    TokenId parent_token;  // -1 = the root
    int rank;
    bool operator==(const Proposal& o) const {
        return token == o.token && parent_token == o.parent_token && rank == o.rank;
    }
};

void PrintTo(const Proposal& p, std::ostream* os) {
    *os << "{token " << p.token << ", parent " << p.parent_token << ", rank " << p.rank << "}";
}

// The tree after d proposes into `tree` (which may hold other sources' proposals already).
std::vector<Proposal> propose(RecycleDrafter* d, TokenId x, int budget, TokenTree tree = {}) {
    DraftScorer scorer;  // no verdicts: the priors, 0.4 / (1 + rank)
    DraftContext ctx;
    ctx.x = x;
    ctx.budget = budget;
    ctx.scorer = &scorer;
    d->propose(ctx, &tree);
    std::vector<Proposal> out;
    for (int i = 0; i < tree.size(); ++i) {
        const TreeNode& v = tree.node(i);
        out.push_back({v.token, v.parent < 0 ? -1 : tree.node(v.parent).token, v.rank});
    }
    return out;
}

void feed(RecycleDrafter* d, const Tokens& tokens, const Tokens& successors) {
    StepRows rows;
    rows.tokens = tokens.data();
    rows.successors = successors.data();
    rows.rows = static_cast<int>(tokens.size());
    rows.k = d->top_k();
    d->on_step(rows);
}

TEST(RecycleDrafter, GrowsTheTreeBestFirstUnderTheBudget) {
    SharedPool pool;
    pool.start_run(2, 4, /*keep=*/false);
    RecycleDrafter d(&pool, 2);
    d.start();
    EXPECT_TRUE(propose(&d, 5, 4).empty());  // nothing known yet
    feed(&d, {5, 7}, {7, 8, 11, 12});
    // Scores: 7 0.4, 8 0.2, 7->11 0.16, 7->12 0.08: the best three.
    EXPECT_EQ(propose(&d, 5, 3), (std::vector<Proposal>{{7, -1, 0}, {8, -1, 1}, {11, 7, 0}}));
}

TEST(RecycleDrafter, ContinuesTheOtherSourcesDrafts) {
    SharedPool pool;
    pool.start_run(2, 4, /*keep=*/false);
    RecycleDrafter d(&pool, 2);
    d.start();
    feed(&d, {5, 21}, {7, 8, 30, 31});
    // A suffix draft 20, 21 under the root, proposed before recycling.
    TokenTree tree;
    const int n20 = tree.add(TokenTree::kRoot, 20, 0.9, DraftSource::kSuffix, 0);
    tree.add(n20, 21, 0.8, DraftSource::kSuffix, 0);
    // Candidates: 7 0.4 and 8 0.2 under the root; 30 0.8 * 0.4 = 0.32 and 31 0.16 under 21 (the
    // successors of the draft's last token). The best two join the tree.
    EXPECT_EQ(propose(&d, 5, 2, tree),
              (std::vector<Proposal>{{20, -1, 0}, {21, 20, 0}, {7, -1, 0}, {30, 21, 0}}));
}

int64_t known(SharedPool* pool) {
    return pool->with_successors([](const SuccessorTable& t) { return t.tokens_known(); });
}

TEST(RecycleDrafter, TheTableLivesAsLongAsThePool) {
    SharedPool pool;
    pool.start_run(2, 4, /*keep=*/false);
    {
        RecycleDrafter first(&pool, 2);
        first.start();
        feed(&first, {5}, {7, 8});
    }
    EXPECT_EQ(known(&pool), 1);
    // A run that keeps the pool, with the same k, starts from what the first one learned.
    pool.start_run(2, 4, /*keep=*/true);
    RecycleDrafter kept(&pool, 2);
    kept.start();
    EXPECT_EQ(propose(&kept, 5, 2), (std::vector<Proposal>{{7, -1, 0}, {8, -1, 1}}));
    // Another k cannot read a table of k = 2: it starts empty.
    RecycleDrafter other_k(&pool, 3);
    other_k.start();
    EXPECT_TRUE(propose(&other_k, 5, 2).empty());
    EXPECT_TRUE(propose(&kept, 5, 2).empty());  // and the k = 2 drafter's table is gone
    // A fresh pool empties it.
    feed(&other_k, {5}, {7, 8, 9});
    EXPECT_EQ(known(&pool), 1);
    pool.start_run(2, 4, /*keep=*/false);
    EXPECT_EQ(known(&pool), 0);
}

}  // namespace
}  // namespace pylookahead
