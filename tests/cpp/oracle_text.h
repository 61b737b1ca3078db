// Oracle texts for the decode-loop tests (oracle_lm.h plays them back as a deterministic LM).
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "pylookahead/types.h"

namespace pylookahead {

// Pseudo-random text over tokens 1..23 where about half of it copies earlier spans, so the
// prompt and the text itself hold n-grams that recur.
inline std::vector<TokenId> mixed_text(int length, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<TokenId> s;
    while (static_cast<int>(s.size()) < length) {
        if (s.size() > 8 && rng() % 2 == 0) {
            const size_t start = rng() % (s.size() - 4), len = 2 + rng() % 6;
            for (size_t i = 0; i < len && start + i < s.size(); ++i) s.push_back(s[start + i]);
        } else {
            s.push_back(static_cast<TokenId>(1 + rng() % 23));
        }
    }
    s.resize(length);
    return s;
}

// A period of 7 distinct tokens, repeated.
inline std::vector<TokenId> periodic_text(int length) {
    const std::vector<TokenId> period = {30, 31, 32, 33, 34, 35, 36};
    std::vector<TokenId> s(length);
    for (int i = 0; i < length; ++i) s[i] = period[i % period.size()];
    return s;
}

// What greedy decoding of `text` returns after `prompt_len` prompt tokens: the continuation, cut
// after max_new_tokens or right after the first end id.
inline std::vector<TokenId> expected(const std::vector<TokenId>& text, int prompt_len,
                                     int max_new_tokens, const std::vector<TokenId>& end_ids) {
    std::vector<TokenId> out;
    for (size_t i = prompt_len; i < text.size() && static_cast<int>(out.size()) < max_new_tokens;
         ++i) {
        out.push_back(text[i]);
        if (std::find(end_ids.begin(), end_ids.end(), text[i]) != end_ids.end()) break;
    }
    return out;
}

}  // namespace pylookahead
