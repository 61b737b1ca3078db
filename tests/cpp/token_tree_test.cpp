// The token tree: trie merging, selection under a budget, and verification, against a brute
// force over random trees (the accepted path is what greedy decoding of the oracle would do);
// the scorer's buckets and the suffix source's grades.
#include "lookahead/token_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "lookahead/draft_scorer.h"
#include "lookahead/pool_drafter.h"
#include "lookahead/shared_pool.h"
#include "lookahead/step_plan.h"
#include "lookahead/suffix_drafter.h"

namespace pylookahead {
namespace {

using Tokens = std::vector<TokenId>;

// Chains of `len` tokens (the classic layout) as tree nodes.
std::vector<TreeNode> chains(const Tokens& cands, int len) {
    std::vector<TreeNode> nodes;
    for (size_t i = 0; i < cands.size(); ++i) {
        TreeNode v;
        v.token = cands[i];
        const int k = static_cast<int>(i) % len;
        v.parent = k == 0 ? -1 : static_cast<int>(i) - 1;
        v.depth = k + 1;
        nodes.push_back(v);
    }
    return nodes;
}

TEST(VerifyTree, NoMatchEmitsT0) {
    const TreeVerdict r = verify_tree(5, chains({1, 2, 3, 4}, 2), Tokens{9, 9, 9, 9}.data());
    EXPECT_TRUE(r.path.empty());
    EXPECT_EQ(r.emitted, (Tokens{5}));
    EXPECT_EQ(r.accepted, (std::vector<uint8_t>{0, 0, 0, 0}));
}

TEST(VerifyTree, EmptyTree) {
    const TreeVerdict r = verify_tree(5, {}, nullptr);
    EXPECT_TRUE(r.path.empty());
    EXPECT_EQ(r.emitted, (Tokens{5}));
}

TEST(VerifyTree, FullMatchKeepsTheBonusToken) {
    // argmax after 5, after 6, after 7
    const TreeVerdict r = verify_tree(5, chains({5, 6, 7}, 3), Tokens{6, 7, 8}.data());
    EXPECT_EQ(r.path, (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(r.emitted, (Tokens{5, 6, 7, 8}));
}

TEST(VerifyTree, PartialMatchEndsWithTheCorrection) {
    const TreeVerdict r = verify_tree(5, chains({5, 6, 1}, 3), Tokens{6, 7, 8}.data());
    EXPECT_EQ(r.path.size(), 2u);
    EXPECT_EQ(r.emitted, (Tokens{5, 6, 7}));
}

TEST(VerifyTree, DeepestWinsAndChainTiesGoToTheEarliest) {
    EXPECT_EQ(verify_tree(5, chains({5, 1, 5, 6}, 2), Tokens{6, 0, 6, 2}.data()).emitted,
              (Tokens{5, 6, 2}));
    // Chains 1 and 2 both accept one token: the earlier one's correction (7) is emitted.
    const TreeVerdict r =
        verify_tree(5, chains({9, 9, 5, 1, 5, 2}, 2), Tokens{0, 0, 7, 0, 8, 0}.data());
    EXPECT_EQ(r.path, (std::vector<int32_t>{2}));
    EXPECT_EQ(r.emitted, (Tokens{5, 7}));
}

TEST(VerifyTree, AChildOfARejectedNodeIsNotAccepted) {
    // 5 -> 6 rejected at the root (t0 = 4), its child matches the argmax at 5 but cannot count.
    const TreeVerdict r = verify_tree(4, chains({5, 6}, 2), Tokens{6, 0}.data());
    EXPECT_TRUE(r.path.empty());
    EXPECT_EQ(r.emitted, (Tokens{4}));
}

TEST(TokenTree, MergesSharedPrefixesAndKeepsTheBestScore) {
    TokenTree tree;
    const int a = tree.add(TokenTree::kRoot, 7, 0.5, DraftSource::kHistory, 0);
    const int b = tree.add(a, 8, 0.25, DraftSource::kHistory, 0);
    EXPECT_EQ(tree.add(TokenTree::kRoot, 7, 0.9, DraftSource::kSuffix, 1), a);
    EXPECT_EQ(tree.add(a, 8, 0.1, DraftSource::kRecycle, 2), b);
    const int c = tree.add(a, 9, 0.3, DraftSource::kRecycle, 0);
    EXPECT_EQ(tree.size(), 3);
    EXPECT_EQ(tree.node(a).source, DraftSource::kSuffix);
    EXPECT_EQ(tree.node(a).rank, 1);
    EXPECT_DOUBLE_EQ(tree.score(a), 0.9);
    EXPECT_EQ(tree.node(b).source, DraftSource::kHistory);
    EXPECT_EQ(tree.node(c).depth, 2);
    std::vector<TreeNode> sel;
    tree.select(2, &sel);
    ASSERT_EQ(sel.size(), 2u);
    EXPECT_EQ(sel[0].token, 7);
    EXPECT_EQ(sel[1].token, 9);  // 0.3 beats 0.25
    EXPECT_EQ(sel[1].parent, 0);
}

TEST(TokenTree, SelectTakesAParentBeforeItsChild) {
    TokenTree tree;
    const int a = tree.add(TokenTree::kRoot, 1, 0.1, DraftSource::kHistory, 0);
    tree.add(a, 2, 0.9, DraftSource::kHistory, 0);  // a score that grows: not verifiable alone
    tree.add(TokenTree::kRoot, 3, 0.5, DraftSource::kHistory, 0);
    std::vector<TreeNode> sel;
    tree.select(1, &sel);
    ASSERT_EQ(sel.size(), 1u);
    EXPECT_EQ(sel[0].token, 3);
    tree.select(2, &sel);  // 1 (0.1) only then opens 2 (0.9)
    ASSERT_EQ(sel.size(), 2u);
    EXPECT_EQ(sel[1].token, 1);
    tree.select(3, &sel);
    ASSERT_EQ(sel.size(), 3u);
    EXPECT_EQ(sel[2].token, 2);
    EXPECT_EQ(sel[2].parent, 1);
    for (size_t i = 0; i < sel.size(); ++i) EXPECT_LT(sel[i].parent, static_cast<int>(i));
}

// Random tries against a brute force: an oracle continuation S (S[0] = t0, S[d] = the argmax
// after S[0..d)); a node's row argmax is S[depth] when its path equals S[0..depth), else noise.
// The accepted path must be the longest prefix of S that the tree holds.
TEST(TokenTree, RandomTreesAcceptTheLongestOraclePrefix) {
    std::mt19937 rng(11);
    for (int trial = 0; trial < 2000; ++trial) {
        const int vocab = 2 + static_cast<int>(rng() % 4);
        Tokens oracle(12);
        for (TokenId& t : oracle) t = static_cast<TokenId>(rng() % vocab);
        TokenTree tree;
        const int proposals = 1 + static_cast<int>(rng() % 6);
        for (int p = 0; p < proposals; ++p) {
            int parent = TokenTree::kRoot;
            double score = 1.0;
            const int len = 1 + static_cast<int>(rng() % 8);
            for (int d = 0; d < len; ++d) {
                // Often follow the oracle, sometimes branch off.
                const TokenId t = rng() % 3 ? oracle[d] : static_cast<TokenId>(rng() % vocab);
                score *= 0.3 + 0.7 * (rng() % 1000) / 1000.0;
                parent = tree.add(parent, t, score, DraftSource::kSuffix, p);
            }
        }
        std::vector<TreeNode> nodes;
        const int budget = 1 + static_cast<int>(rng() % 20);
        tree.select(budget, &nodes);
        ASSERT_LE(static_cast<int>(nodes.size()), budget);
        // Paths and argmax.
        std::vector<Tokens> path(nodes.size());
        Tokens argmax(nodes.size());
        for (size_t i = 0; i < nodes.size(); ++i) {
            ASSERT_LT(nodes[i].parent, static_cast<int>(i));
            if (nodes[i].parent >= 0) path[i] = path[nodes[i].parent];
            path[i].push_back(nodes[i].token);
            ASSERT_EQ(static_cast<int>(path[i].size()), nodes[i].depth);
            const bool on = std::equal(path[i].begin(), path[i].end(), oracle.begin());
            argmax[i] = on ? oracle[path[i].size()] : static_cast<TokenId>(vocab + i);
        }
        size_t longest = 0;
        for (const Tokens& p : path) {
            if (std::equal(p.begin(), p.end(), oracle.begin()))
                longest = std::max(longest, p.size());
        }
        const TreeVerdict v = verify_tree(oracle[0], nodes, argmax.data());
        ASSERT_EQ(v.path.size(), longest) << "trial " << trial;
        ASSERT_EQ(v.emitted, Tokens(oracle.begin(), oracle.begin() + longest + 1))
            << "trial " << trial;
    }
}

TEST(DraftScorer, LearnsAcceptanceByDepthAndRank) {
    DraftScorer scorer;
    const double before = scorer.rate(DraftSource::kSuffix, 1, 0);
    TreeNode a;  // depth 1, accepted
    a.source = DraftSource::kSuffix;
    TreeNode b = a;  // its child, rejected
    b.parent = 0;
    b.depth = 2;
    TreeNode c = a;  // another root child (rank 1), rejected
    c.token = 1;
    c.rank = 1;
    TreeNode d = c;  // its child: not offered
    d.parent = 2;
    d.depth = 2;
    for (int i = 0; i < 50; ++i) scorer.record({a, b, c, d}, {1, 0, 0, 0});
    EXPECT_GT(scorer.rate(DraftSource::kSuffix, 1, 0), before);
    EXPECT_LT(scorer.rate(DraftSource::kSuffix, 2, 0), 0.1);
    EXPECT_DOUBLE_EQ(scorer.offered(DraftSource::kSuffix, 2, 0), 50.0);
    EXPECT_DOUBLE_EQ(scorer.offered(DraftSource::kSuffix, 2, 1), 0.0);
    EXPECT_LT(scorer.rate(DraftSource::kSuffix, 1, 1), 0.1);
}

// What drafter `d` proposes for x (recent: the kContextLen tokens before it, or null).
TokenTree proposed(Drafter& d, TokenId x, const TokenId* recent, int budget,
                   const DraftScorer& scorer) {
    DraftContext ctx;
    ctx.x = x;
    ctx.recent = recent;
    ctx.budget = budget;
    ctx.scorer = &scorer;
    TokenTree tree;
    d.propose(ctx, &tree);
    return tree;
}

// Grades are buckets of their own: verdicts on weak suffix matches leave the rate of strong ones
// where it was, and before any verdict a longer match starts higher.
TEST(DraftScorer, LearnsEachGradeApart) {
    DraftScorer scorer;
    for (int g = 1; g < DraftScorer::kGrades; ++g) {
        EXPECT_GT(scorer.rate(DraftSource::kSuffix, 1, 0, g),
                  scorer.rate(DraftSource::kSuffix, 1, 0, g - 1));
    }
    const double strong = scorer.rate(DraftSource::kSuffix, 1, 0, 6);
    TreeNode weak;  // depth 1, rank 0, grade 0, rejected
    weak.source = DraftSource::kSuffix;
    for (int i = 0; i < 50; ++i) scorer.record({weak}, {0});
    EXPECT_LT(scorer.rate(DraftSource::kSuffix, 1, 0, 0), 0.05);
    EXPECT_DOUBLE_EQ(scorer.rate(DraftSource::kSuffix, 1, 0, 6), strong);
    EXPECT_DOUBLE_EQ(scorer.offered(DraftSource::kSuffix, 1, 0, 0), 50.0);
    EXPECT_DOUBLE_EQ(scorer.offered(DraftSource::kSuffix, 1, 0, 6), 0.0);
    // Grades past the last share it; a negative one is grade 0.
    EXPECT_DOUBLE_EQ(scorer.rate(DraftSource::kSuffix, 1, 0, 99), strong);
    EXPECT_DOUBLE_EQ(scorer.rate(DraftSource::kSuffix, 1, 0, -1),
                     scorer.rate(DraftSource::kSuffix, 1, 0, 0));
}

TEST(DraftScorer, GradesAMatchByItsLength) {
    const int want[] = {0, 0, 1, 2, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6};
    for (int length = 1; length <= 20; ++length) {
        EXPECT_EQ(DraftScorer::match_grade(length), want[length]) << "length " << length;
    }
    EXPECT_EQ(DraftScorer::match_grade(SuffixDrafter::kMaxExtend), DraftScorer::kGrades - 1);
}

// The text ends with 12 13 14 15 16: the earlier 16 after 12 .. 15 matches 5 tokens (grade 3),
// the one after 99 matches 16 alone (grade 0). Each continuation's nodes carry its grade, and
// its scores are the rates of that grade.
TEST(SuffixDrafter, EachContinuationCarriesItsGrade) {
    SuffixDrafter d(/*max_branches=*/2, /*max_depth=*/2);
    d.start(nullptr, {10, 11, 12, 13, 14, 15, 16, 50, 99, 16, 60, 12, 13, 14, 15}, 16);
    DraftScorer scorer;
    const TokenTree tree = proposed(d, 16, nullptr, 2, scorer);
    ASSERT_EQ(tree.size(), 4);
    const struct {
        TokenId token;
        int depth, rank, grade;
    } want[] = {{50, 1, 0, 3}, {99, 2, 0, 3}, {60, 1, 1, 0}, {12, 2, 1, 0}};
    for (int i = 0; i < 4; ++i) {
        const TreeNode& v = tree.node(i);
        EXPECT_EQ(v.token, want[i].token) << i;
        EXPECT_EQ(v.depth, want[i].depth) << i;
        EXPECT_EQ(v.rank, want[i].rank) << i;
        EXPECT_EQ(v.grade, want[i].grade) << i;
    }
    EXPECT_DOUBLE_EQ(tree.score(0), scorer.rate(DraftSource::kSuffix, 1, 0, 3));
    EXPECT_DOUBLE_EQ(tree.score(3), scorer.rate(DraftSource::kSuffix, 1, 1, 0) *
                                        scorer.rate(DraftSource::kSuffix, 2, 1, 0));
}

// A seeded pool entry is graded by its match: x and the context tokens equal to the text's
// (here 2 of 3: a match of 3 tokens, grade 2); a window entry, which has no context, by grade 0.
TEST(PoolDrafter, GradesSeededEntriesByTheirMatchedContext) {
    SharedPool pool;
    pool.start_run(/*ngram_len=*/2, /*capacity=*/4, /*keep=*/false);
    const Tokens seeded{20, 21}, harvested{30, 31}, context{7, 8, 9};
    pool.write([&](NgramPool& p) {
        p.insert(16, harvested.data(), NgramSource::kWindow);
        p.insert(16, seeded.data(), NgramSource::kSeed, context.data());
    });
    PoolDrafter d(&pool, 2);
    DraftScorer scorer;
    const Tokens recent{5, 8, 9};  // the text before x = 16
    const TokenTree tree = proposed(d, 16, recent.data(), 4, scorer);
    ASSERT_EQ(tree.size(), 4);
    const struct {
        TokenId token;
        DraftSource source;
        int rank, grade;
    } want[] = {{20, DraftSource::kHistory, 0, 2},
                {21, DraftSource::kHistory, 0, 2},
                {30, DraftSource::kWindow, 1, 0},
                {31, DraftSource::kWindow, 1, 0}};
    for (int i = 0; i < 4; ++i) {
        const TreeNode& v = tree.node(i);
        EXPECT_EQ(v.token, want[i].token) << i;
        EXPECT_EQ(v.source, want[i].source) << i;
        EXPECT_EQ(v.rank, want[i].rank) << i;
        EXPECT_EQ(v.grade, want[i].grade) << i;
    }
    EXPECT_DOUBLE_EQ(tree.score(0), scorer.rate(DraftSource::kHistory, 1, 0, 2));
}

TEST(StepPlan, TreeRowsSeeXTheirAncestorsAndThemselves) {
    StepBudget b;
    b.window_size = 0;
    b.ngram_size = 3;
    b.tokens_per_step = 1;
    b.verify_begin = 1;
    const StepLayout window = build_step_layout(b);
    // x, then a(1) -> b(2) and a(1) -> c(2), then one padding row.
    std::vector<TreeNode> nodes(3);
    nodes[0].token = 10;
    nodes[1].token = 11;
    nodes[1].parent = 0;
    nodes[1].depth = 2;
    nodes[2].token = 12;
    nodes[2].parent = 0;
    nodes[2].depth = 2;
    StepPlan plan;
    build_step_plan(window, {}, 5, std::move(nodes), 4, &plan);
    EXPECT_EQ(plan.tokens, (Tokens{5, 10, 11, 12, 5}));
    EXPECT_EQ(plan.offsets, (std::vector<int32_t>{0, 1, 2, 2, 1}));
    const std::vector<uint8_t> mask = {1, 0, 0, 0, 0,  //
                                       1, 1, 0, 0, 0,  //
                                       1, 1, 1, 0, 0,  //
                                       1, 1, 0, 1, 0,  //
                                       1, 0, 0, 0, 1};
    EXPECT_EQ(plan.mask, mask);
    EXPECT_EQ(plan.out_rows, (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(plan.exact_rows, (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(plan.out_tree, 1);
    EXPECT_EQ(plan.tree_begin, 1);
}

// The drawing in step_plan.h.
TEST(StepPlan, GoldenTrieWithPadding) {
    StepBudget b;
    b.ngram_size = 3;
    b.tokens_per_step = 1;
    b.verify_begin = 1;
    auto node = [](TokenId t, int parent, int depth) {
        TreeNode v;
        v.token = t;
        v.parent = parent;
        v.depth = depth;
        return v;
    };
    // a=1, b=2, c=3, d=4, e=5
    std::vector<TreeNode> nodes = {node(1, -1, 1), node(2, 0, 2), node(3, 0, 2), node(4, -1, 1),
                                   node(5, 2, 3)};
    StepPlan plan;
    build_step_plan(build_step_layout(b), {}, 9, std::move(nodes), 6, &plan);
    const char* want[] = {"1......", "11.....", "111....", "11.1...",
                          "1...1..", "11.1.1.", "1.....1"};
    for (int r = 0; r < 7; ++r) {
        std::string row;
        for (int k = 0; k < 7; ++k) row += plan.mask[r * 7 + k] ? '1' : '.';
        EXPECT_EQ(row, want[r]) << "row " << r;
    }
    EXPECT_EQ(plan.offsets, (std::vector<int32_t>{0, 1, 2, 2, 1, 3, 1}));
    EXPECT_EQ(plan.tokens, (Tokens{9, 1, 2, 3, 4, 5, 9}));
}

// With all G candidates present, the classic plan is the static layout of the paper.
TEST(StepPlan, ClassicChainsEqualTheStaticLayout) {
    for (int W : {0, 1, 3}) {
        for (int N : {2, 3, 5}) {
            for (int G : {1, 2, 4}) {
                LookaheadConfig c;
                c.window_size = W;
                c.ngram_size = N;
                c.verification_set_size = G;
                const StepBudget b = step_budget(c);
                const StepLayout full = build_step_layout(b);
                const StepLayout window = build_step_layout(window_budget(b));
                Tokens cands(static_cast<size_t>(G) * (N - 1));
                for (size_t i = 0; i < cands.size(); ++i) cands[i] = 100 + static_cast<TokenId>(i);
                std::vector<TreeNode> nodes = chains(cands, N - 1);
                Tokens cells(static_cast<size_t>(W) * (N - 1), 7);
                StepPlan plan;
                build_step_plan(window, cells, 1, std::move(nodes), G * (N - 1), &plan);
                EXPECT_EQ(plan.offsets, full.offsets) << W << N << G;
                EXPECT_EQ(plan.mask, full.mask) << W << N << G;
                EXPECT_EQ(plan.out_rows, full.out_rows) << W << N << G;
                EXPECT_EQ(plan.exact_rows, full.exact_rows) << W << N << G;
                EXPECT_EQ(plan.out_tree, full.out_verify) << W << N << G;
                EXPECT_EQ(plan.out_last_level, full.out_last_level) << W << N << G;
            }
        }
    }
}

}  // namespace
}  // namespace pylookahead
