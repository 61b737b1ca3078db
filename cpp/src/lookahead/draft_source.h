// The interface every draft source of the token tree implements, std-only. A source proposes
// continuations of the step's input token x, each token with a score (DraftScorer), into the
// step's TokenTree; it may learn from the emitted text and from the model's outputs of a step.
// Sources never see the verdict's effect on the output: what they propose changes only how
// many tokens a step accepts.
#pragma once

#include <cstdint>
#include <vector>

#include "lookahead/draft_scorer.h"
#include "lookahead/token_tree.h"
#include "pylookahead/types.h"

namespace pylookahead {

// What a source knows when it proposes.
struct DraftContext {
    TokenId x = 0;                        // the step's input token (the last emitted one)
    const TokenId* recent = nullptr;      // [NgramPool::kContextLen] tokens before x, oldest first
    int budget = 0;                       // nodes the tree keeps: proposing more is wasted work
    const DraftScorer* scorer = nullptr;  // rates of the proposals' scores
};

// A verified step's model outputs, for sources that learn from them.
struct StepRows {
    const TokenId* tokens = nullptr;      // [rows] the input token of each out row
    const TokenId* successors = nullptr;  // [rows * k] each row's k best next tokens, best first
    int rows = 0;
    int k = 0;
};

class Drafter {
  public:
    virtual ~Drafter() = default;
    // Adds proposals for the continuation of ctx.x under the tree's root.
    virtual void propose(const DraftContext& ctx, TokenTree* tree) = 0;
    // The text grew by `tokens` (this step's emitted tokens; the next x is the last).
    virtual void on_emitted(const TokenId* tokens, int n) { (void)tokens, (void)n; }
    // A step ran; its rows in the order the source should learn them (later rows win).
    virtual void on_step(const StepRows& rows) { (void)rows; }
};

// Adds path[0..n) under the root as one proposal of `source` with `rank` and `grade`: token d
// (depth d + 1) gets score prod_{i <= d} scorer.rate(source, i + 1, rank, grade).
void add_scored_path(TokenTree* tree, const DraftScorer& scorer, const TokenId* path, int n,
                     DraftSource source, int rank, int grade = 0);

}  // namespace pylookahead
