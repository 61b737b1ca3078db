#include "lookahead/jacobi_window.h"

#include <algorithm>
#include <random>

#include "check.h"

namespace pylookahead {

namespace {

// Uniform index in [0, n) by rejection, independent of the standard library's distributions.
uint64_t uniform_index(std::mt19937_64& rng, uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // multiples of n below 2^64 - 1
    uint64_t r = rng();
    while (r >= limit) r = rng();
    return r % n;
}

}  // namespace

JacobiWindow::JacobiWindow(int window_size, int ngram_size)
    : window_size_(window_size),
      ngram_size_(ngram_size),
      cells_(static_cast<size_t>(ngram_size - 1) * window_size, 0),
      ngram_(ngram_size - 1, 0) {
    PYLA_CHECK(window_size >= 0 && ngram_size >= 2, "W " << window_size << ", N " << ngram_size);
}

void JacobiWindow::init(const std::vector<TokenId>& prompt, uint64_t seed) {
    PYLA_CHECK(!prompt.empty(), "empty prompt");
    std::mt19937_64 rng(seed);
    if (cells_.empty()) return;  // W = 0: no window
    cells_[0] = 0;
    for (size_t i = 1; i < cells_.size(); ++i) {
        cells_[i] = prompt[uniform_index(rng, prompt.size())];
    }
}

void JacobiWindow::harvest(TokenId x, const TokenId* next, NgramPool* pool) const {
    const int W = window_size_, levels = ngram_size_ - 1;
    for (int j = 0; j < W; ++j) {
        for (int l = 1; l < levels; ++l) ngram_[l - 1] = at(l, j);
        ngram_[levels - 1] = next[j];
        pool->insert(j == 0 ? x : at(0, j), ngram_.data(), NgramSource::kWindow);
    }
}

void JacobiWindow::shift(const TokenId* next) {
    // In row order the shift is: drop the first W cells, append next. Cell 0 (x) stays unused.
    const int W = window_size_;
    if (W == 0) return;
    std::copy(cells_.begin() + W, cells_.end(), cells_.begin());
    std::copy(next, next + W, cells_.end() - W);
    cells_[0] = 0;
}

}  // namespace pylookahead
