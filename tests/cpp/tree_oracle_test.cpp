// The draft tree against the oracle LM (oracle_lm.h): for every mix of sources, row budget and
// window, with and without fixed shapes, the output is the oracle text token for token, every
// cut by max_new_tokens or an end id is exact, and the per-source counters add up.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "lookahead/decode_loop.h"
#include "oracle_lm.h"
#include "oracle_text.h"
#include "pylookahead/errors.h"

namespace pylookahead {
namespace {

using Tokens = std::vector<TokenId>;
constexpr int kVocab = 64;

// OracleLm that asks for fixed step shapes (as CUDA graphs do): plans are padded to R rows.
class FixedShapeLm : public OracleLm {
  public:
    using OracleLm::OracleLm;
    bool prefers_fixed_shapes() const override { return true; }
};

struct TreeParams {
    int W, N, G, R, S, K;
    bool fixed;
};

LookaheadConfig config_of(const TreeParams& p) {
    LookaheadConfig c;
    c.window_size = p.W;
    c.ngram_size = p.N;
    c.verification_set_size = p.G;
    c.tree_rows = p.R;
    c.suffix_branches = p.S;
    c.recycle_top_k = p.K;
    c.seed = 5;
    c.validate();
    return c;
}

GenerationResult decode(const Tokens& text, int prompt_len, int max_new, const TreeParams& p,
                        const Tokens& ends = {}, int* forwards = nullptr,
                        std::vector<int>* step_rows = nullptr, int64_t* skipped = nullptr) {
    std::unique_ptr<OracleLm> lm = p.fixed ? std::make_unique<FixedShapeLm>(text, kVocab, 4096)
                                           : std::make_unique<OracleLm>(text, kVocab, 4096);
    DecodeRequest request;
    request.prompt.assign(text.begin(), text.begin() + prompt_len);
    request.max_new_tokens = max_new;
    request.end_ids = ends;
    request.lookahead = config_of(p);
    GenerationResult r = run_decode(*lm, request, nullptr);
    if (forwards) *forwards = lm->num_forward();
    if (skipped) *skipped = lm->skipped_rows();
    (void)step_rows;
    return r;
}

void check_counters(const GenerationResult& r, const TreeParams& p) {
    const GenerationStats& s = r.stats;
    ASSERT_EQ(s.accept_histogram.size(), static_cast<size_t>(p.R + 2));
    expect_histogram_adds_up(s);
    // Every emitted token after the prefill's is a draft token or a step's last (bonus) token,
    // except where a stop cut a step's tokens short.
    const int64_t drafted = std::accumulate(s.accepted_tokens_by_source.begin(),
                                            s.accepted_tokens_by_source.end(), int64_t{0});
    EXPECT_LE(drafted + s.steps, s.new_tokens);
    EXPECT_GE(drafted + s.steps, s.new_tokens - 1);
    if (p.S == 0) EXPECT_EQ(s.accepted_tokens_by_source[2], 0);
    if (p.K == 0) EXPECT_EQ(s.accepted_tokens_by_source[3], 0);
    if (p.G == 0) EXPECT_EQ(s.accepted_tokens_by_source[0] + s.accepted_tokens_by_source[1], 0);
}

class TreeOracle : public ::testing::TestWithParam<TreeParams> {};

TEST_P(TreeOracle, EqualsGreedyWithEveryCut) {
    const TreeParams p = GetParam();
    int64_t skipped_total = 0;
    for (const auto& [text, prompt_len] :
         {std::pair{mixed_text(240, 1), 60}, std::pair{mixed_text(200, 3), 9},
          std::pair{periodic_text(160), 12}}) {
        const int max_new = static_cast<int>(text.size()) - prompt_len - 8;
        int forwards = 0;
        int64_t skipped = 0;
        const GenerationResult r =
            decode(text, prompt_len, max_new, p, {}, &forwards, nullptr, &skipped);
        EXPECT_EQ(r.token_ids, expected(text, prompt_len, max_new, {}));
        EXPECT_EQ(forwards, 1 + r.stats.steps);
        // The model's skipped rows (-1, lookahead/row_reads.h) are counted, and never read.
        EXPECT_EQ(r.stats.skipped_head_rows, skipped);
        skipped_total += skipped;
        check_counters(r, p);
        for (int m : {1, 2, 3, 5, 8, 13, 21, 34}) {
            const GenerationResult c = decode(text, prompt_len, m, p);
            EXPECT_EQ(c.token_ids, expected(text, prompt_len, m, {})) << "max_new_tokens " << m;
            check_counters(c, p);
        }
        for (int i = 0; i < 20; i += 3) {
            const Tokens ends = {text[prompt_len + i]};
            const GenerationResult c = decode(text, prompt_len, max_new, p, ends);
            EXPECT_EQ(c.token_ids, expected(text, prompt_len, max_new, ends))
                << "end id " << ends[0];
            EXPECT_EQ(c.stop_reason, StopReason::kEndToken);
        }
    }
    // Rejected drafts leave rows unread.
    EXPECT_GT(skipped_total, 0);
}

// On a text that repeats, every source finds the continuation: many tokens per step.
TEST_P(TreeOracle, PeriodicTextCompresses) {
    const TreeParams p = GetParam();
    const Tokens text = periodic_text(400);
    const GenerationResult r = decode(text, 12, 300, p);
    ASSERT_EQ(r.token_ids, expected(text, 12, 300, {}));
    EXPECT_GT(r.stats.compression(), std::min(3.0, 0.5 * p.R)) << "steps " << r.stats.steps;
}

std::vector<TreeParams> grid() {
    std::vector<TreeParams> g;
    for (bool fixed : {false, true}) {
        g.push_back({0, 4, 4, 8, 0, 0, fixed});    // pool alone, as a trie
        g.push_back({0, 3, 0, 8, 2, 0, fixed});    // suffix alone
        g.push_back({0, 3, 0, 16, 0, 4, fixed});   // recycling alone
        g.push_back({0, 5, 8, 32, 4, 4, fixed});   // every history source
        g.push_back({3, 4, 3, 16, 2, 2, fixed});   // with the Jacobi window
        g.push_back({4, 2, 2, 4, 1, 1, fixed});    // N = 2, small budget
        g.push_back({1, 3, 1, 1, 1, 1, fixed});    // one row
        g.push_back({0, 6, 16, 64, 8, 8, fixed});  // large
    }
    return g;
}

INSTANTIATE_TEST_SUITE_P(Grid, TreeOracle, ::testing::ValuesIn(grid()), [](const auto& info) {
    const TreeParams& p = info.param;
    return "W" + std::to_string(p.W) + "N" + std::to_string(p.N) + "G" + std::to_string(p.G) + "R" +
           std::to_string(p.R) + "S" + std::to_string(p.S) + "K" + std::to_string(p.K) +
           (p.fixed ? "Fixed" : "");
});

// Suffix lookup finds a long earlier span and the step accepts all of it at once.
TEST(TreeOracleCases, SuffixLookupAcceptsALongCopyInOneStep) {
    //   prompt: a span "11 12 ... 20" after "5 6", noise, then "5 6" again; the text continues
    //   with the same span.
    Tokens text = {5, 6, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 2, 3, 4, 9, 5, 6};
    const int prompt_len = static_cast<int>(text.size()) - 1;  // the prefill emits 6
    for (TokenId t = 11; t <= 20; ++t) text.push_back(t);
    text.push_back(40);
    for (int i = 0; i < 10; ++i) text.push_back(41 + i);
    const TreeParams p{0, 3, 0, 16, 1, 0, false};
    std::vector<Tokens> chunks;
    OracleLm lm(text, kVocab, 4096);
    DecodeRequest request;
    request.prompt.assign(text.begin(), text.begin() + prompt_len);
    request.max_new_tokens = 14;
    request.lookahead = config_of(p);
    const GenerationResult r = run_decode(lm, request, [&](const Tokens& c) {
        chunks.push_back(c);
        return true;
    });
    EXPECT_EQ(r.token_ids, expected(text, prompt_len, 14, {}));
    ASSERT_GE(chunks.size(), 2u);
    EXPECT_EQ(chunks[1], (Tokens{11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 40}));
    EXPECT_EQ(r.stats.accepted_tokens_by_source[2], 10);
}

// The kept texts of a shared pool are searched too: the second generation copies the first.
TEST(TreeOracleCases, SuffixLookupSearchesAKeptPoolsTexts) {
    const Tokens text = mixed_text(160, 9);
    const TreeParams p{0, 3, 0, 16, 2, 0, false};
    auto pool = std::make_shared<SharedPool>();
    auto run_once = [&](bool keep) {
        OracleLm lm(text, kVocab, 4096);
        DecodeRequest request;
        request.prompt.assign(text.begin(), text.begin() + 20);
        request.max_new_tokens = 120;
        request.lookahead = config_of(p);
        request.pool = pool;
        request.keep_pool = keep;
        return run_decode(lm, request, nullptr);
    };
    const GenerationResult first = run_once(false);
    const GenerationResult second = run_once(true);
    EXPECT_EQ(first.token_ids, expected(text, 20, 120, {}));
    EXPECT_EQ(second.token_ids, first.token_ids);
    EXPECT_LT(second.stats.steps * 3, first.stats.steps);
    const GenerationResult cleared = run_once(false);
    EXPECT_EQ(cleared.stats.steps, first.stats.steps);
}

TEST(TreeOracleCases, BadTreeConfigsAreConfigErrors) {
    LookaheadConfig c;
    c.suffix_branches = 2;
    EXPECT_THROW(c.validate(), ConfigError);  // no tree
    c.suffix_branches = 0;
    c.tree_rows = 513;
    EXPECT_THROW(c.validate(), ConfigError);
    c.tree_rows = 8;
    c.recycle_top_k = 17;
    EXPECT_THROW(c.validate(), ConfigError);
    c.recycle_top_k = 0;
    c.verification_set_size = 0;
    EXPECT_THROW(c.validate(), ConfigError);  // a tree without a source
    c.suffix_branches = 1;
    EXPECT_NO_THROW(c.validate());
    try {
        LookaheadConfig d;
        d.recycle_top_k = 3;
        d.validate();
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("recycle_top_k needs tree_rows >= 1 (got 3"),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace pylookahead
