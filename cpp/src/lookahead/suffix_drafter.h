// Suffix lookup, a draft source (std-only): the continuations of earlier occurrences of the
// text's current suffix, longest match first, as prompt-lookup decoding and SuffixDecoding do.
// It searches the prompt and the output so far, and the texts of earlier generations that a kept
// or shared pool holds (SharedPool::texts), each text a separate segment (no match or
// continuation crosses from one to the next).
//
// Index: for every position i and every m in 1..kMaxKey, a hash of text[i-m+1..i] -> positions
// (ascending). A lookup takes the last m tokens (x last) for m = kMaxKey down to 1, collects
// earlier positions whose m tokens equal them (newest first, at most kScanPerKey per m), extends
// each match backwards (up to kMaxExtend tokens) and proposes the continuations of the longest,
// then newest, matches, each graded by its match length (DraftScorer::match_grade). Memory:
// O(kMaxKey) positions per text token. Cost per lookup: O(kMaxKey * kScanPerKey * kMaxExtend)
// token compares, per append O(kMaxKey) hash inserts.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "lookahead/draft_source.h"

namespace pylookahead {

class SuffixDrafter : public Drafter {
  public:
    static constexpr int kMaxKey = 4;
    static constexpr int kMaxExtend = 32;
    static constexpr int kScanPerKey = 64;

    // max_branches >= 1 continuations per lookup, each of at most max_depth >= 1 tokens.
    SuffixDrafter(int max_branches, int max_depth);

    // Forgets everything, indexes `kept` (may be null; each text a segment) and starts the
    // current text as prompt + first (the prefill's token, the first x).
    void start(const std::deque<std::vector<TokenId>>* kept, const std::vector<TokenId>& prompt,
               TokenId first);
    void on_emitted(const TokenId* tokens, int n) override;
    void propose(const DraftContext& ctx, TokenTree* tree) override;

  private:
    void append(TokenId t);
    void end_segment();
    uint64_t key_hash(int64_t end, int m) const;

    int max_branches_, max_depth_;
    std::vector<TokenId> text_;  // segments separated by kSeparator
    int64_t segment_begin_ = 0;  // first index of the current segment
    std::array<std::unordered_map<uint64_t, std::vector<int32_t>>, kMaxKey> ends_;
    std::vector<std::vector<TokenId>> found_;  // propose() scratch: the continuations, best first
    std::vector<int> found_grades_;            // propose() scratch: their grades
    struct Match {
        int32_t end;     // index of the last matched token
        int32_t length;  // matched tokens, extended
    };
    std::vector<Match> matches_;  // propose() scratch
};

}  // namespace pylookahead
