#include "lookahead/suffix_drafter.h"

#include <algorithm>

#include "check.h"

namespace pylookahead {

namespace {
constexpr TokenId kSeparator = -1;  // between segments; never a token id
}

SuffixDrafter::SuffixDrafter(int max_branches, int max_depth)
    : max_branches_(max_branches), max_depth_(max_depth) {
    PYLA_CHECK(max_branches >= 1 && max_depth >= 1,
               "suffix drafter " << max_branches << " x " << max_depth);
}

uint64_t SuffixDrafter::key_hash(int64_t end, int m) const {
    uint64_t h = 0x84222325cbf29ce4ull ^ static_cast<uint64_t>(m);
    for (int64_t i = end - m + 1; i <= end; ++i) {
        h = (h ^ static_cast<uint32_t>(text_[i])) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

void SuffixDrafter::append(TokenId t) {
    const int64_t i = static_cast<int64_t>(text_.size());
    PYLA_CHECK(i < INT32_MAX, "suffix text too long");
    text_.push_back(t);
    for (int m = 1; m <= kMaxKey && i - m + 1 >= segment_begin_; ++m) {
        ends_[m - 1][key_hash(i, m)].push_back(static_cast<int32_t>(i));
    }
}

void SuffixDrafter::end_segment() {
    if (static_cast<int64_t>(text_.size()) == segment_begin_) return;
    text_.push_back(kSeparator);
    segment_begin_ = static_cast<int64_t>(text_.size());
}

void SuffixDrafter::start(const std::deque<std::vector<TokenId>>* kept,
                          const std::vector<TokenId>& prompt, TokenId first) {
    text_.clear();
    segment_begin_ = 0;
    for (auto& m : ends_) m.clear();
    if (kept != nullptr) {
        for (const std::vector<TokenId>& t : *kept) {
            for (TokenId id : t) append(id);
            end_segment();
        }
    }
    for (TokenId id : prompt) append(id);
    append(first);
}

void SuffixDrafter::on_emitted(const TokenId* tokens, int n) {
    for (int i = 0; i < n; ++i) append(tokens[i]);
}

void SuffixDrafter::propose(const DraftContext& ctx, TokenTree* tree) {
    found_.clear();
    matches_.clear();
    const int64_t end = static_cast<int64_t>(text_.size()) - 1;
    PYLA_CHECK(end >= segment_begin_ && text_[end] == ctx.x,
               "suffix text does not end with the step's input token");
    const int64_t seg_len = end - segment_begin_ + 1;
    for (int m = static_cast<int>(std::min<int64_t>(kMaxKey, seg_len)); m >= 1; --m) {
        if (static_cast<int>(matches_.size()) >= max_branches_) break;  // longer ones suffice
        auto it = ends_[m - 1].find(key_hash(end, m));
        if (it == ends_[m - 1].end()) continue;
        const std::vector<int32_t>& ends = it->second;
        int scanned = 0;
        for (auto p = ends.rbegin(); p != ends.rend() && scanned < kScanPerKey; ++p) {
            const int32_t i = *p;
            if (i >= end) continue;  // the suffix itself
            ++scanned;
            if (text_[i + 1] == kSeparator) continue;  // nothing follows it
            bool seen = false;
            for (const Match& mt : matches_) seen = seen || mt.end == i;
            if (seen) continue;
            int len = 0;
            while (len < kMaxExtend && i - len >= 0 && end - len > i &&
                   text_[i - len] == text_[end - len] && text_[i - len] != kSeparator) {
                ++len;
            }
            if (len < m) continue;  // a hash collision
            matches_.push_back({i, len});
        }
    }
    std::stable_sort(matches_.begin(), matches_.end(), [](const Match& a, const Match& b) {
        return a.length != b.length ? a.length > b.length : a.end > b.end;
    });
    const int depth = std::min(max_depth_, std::max(1, ctx.budget));
    std::vector<TokenId> cont;
    found_grades_.clear();
    for (const Match& mt : matches_) {
        if (static_cast<int>(found_.size()) >= max_branches_) break;
        cont.clear();
        for (int64_t j = mt.end + 1; j <= end && static_cast<int>(cont.size()) < depth; ++j) {
            if (text_[j] == kSeparator) break;
            cont.push_back(text_[j]);
        }
        if (cont.empty()) continue;
        if (std::find(found_.begin(), found_.end(), cont) != found_.end()) continue;
        found_.push_back(cont);
        found_grades_.push_back(DraftScorer::match_grade(mt.length));
    }
    for (size_t r = 0; r < found_.size(); ++r) {
        add_scored_path(tree, *ctx.scorer, found_[r].data(), static_cast<int>(found_[r].size()),
                        DraftSource::kSuffix, static_cast<int>(r), found_grades_[r]);
    }
}

}  // namespace pylookahead
