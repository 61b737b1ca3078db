// validate() of the option structs that the std-only core owns.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pylookahead/config.h"
#include "pylookahead/errors.h"

namespace pylookahead {

namespace {

constexpr int kMaxWindowSize = 64;
constexpr int kMaxNgramSize = 64;
constexpr int kMaxVerificationSetSize = 64;
constexpr int kMaxTokensPerStep = 1024;
constexpr int kMaxTreeRows = 512;
constexpr int kMaxBranches = 16;

void check_range(const char* field, int value, int lo, int hi) {
    if (value < lo) {
        throw ConfigError(std::string(field) + " must be >= " + std::to_string(lo) + " (got " +
                          std::to_string(value) + ")");
    }
    if (value > hi) {
        throw ConfigError(std::string(field) + " must be <= " + std::to_string(hi) + " (got " +
                          std::to_string(value) + ")");
    }
}

// A double as users wrote it: shortest round-trip form ("1e-09", "0.8", "inf", "1e+300").
std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    for (int digits = 1; digits < 17; ++digits) {  // the fewest digits that read back the same
        char shorter[32];
        std::snprintf(shorter, sizeof shorter, "%.*g", digits, v);
        if (std::strtod(shorter, nullptr) == v) return shorter;
    }
    return buf;
}

}  // namespace

void LookaheadConfig::validate() const {
    check_range("window_size", window_size, 0, kMaxWindowSize);
    check_range("ngram_size", ngram_size, 2, kMaxNgramSize);
    check_range("verification_set_size", verification_set_size, 0, kMaxVerificationSetSize);
    check_range("tree_rows", tree_rows, 0, kMaxTreeRows);
    check_range("suffix_branches", suffix_branches, 0, kMaxBranches);
    check_range("recycle_top_k", recycle_top_k, 0, kMaxBranches);
    if (!tree()) {
        if (suffix_branches > 0 || recycle_top_k > 0) {
            throw ConfigError(
                std::string(suffix_branches > 0 ? "suffix_branches" : "recycle_top_k") +
                " needs tree_rows >= 1 (got " +
                std::to_string(suffix_branches > 0 ? suffix_branches : recycle_top_k) +
                " with tree_rows 0): only the draft tree verifies those proposals");
        }
        if (window_size == 0 && verification_set_size == 0) {
            throw ConfigError(
                "verification_set_size must be >= 1 when window_size is 0 (got 0): a step without "
                "window and candidates could only emit one token");
        }
    } else if (verification_set_size == 0 && suffix_branches == 0 && recycle_top_k == 0) {
        throw ConfigError("a draft tree (tree_rows " + std::to_string(tree_rows) +
                          ") needs a source: verification_set_size, suffix_branches or "
                          "recycle_top_k >= 1 (got all 0)");
    }
    if (tokens_per_step() > kMaxTokensPerStep) {
        throw ConfigError(
            std::string("tokens per step ") +
            (tree()             ? "window rows + tree_rows"
             : window_size == 0 ? "1 + verification_set_size * (ngram_size - 1)"
                                : "(window_size + verification_set_size) * "
                                  "(ngram_size - 1)") +
            " must be <= " + std::to_string(kMaxTokensPerStep) + " (got " +
            std::to_string(tokens_per_step()) + " for window_size " + std::to_string(window_size) +
            ", ngram_size " + std::to_string(ngram_size) + ", verification_set_size " +
            std::to_string(verification_set_size) +
            (tree() ? ", tree_rows " + std::to_string(tree_rows) : std::string()) + ")");
    }
}

void AutoLookahead::validate() const {
    check_range("replan_interval", replan_interval, 1, 1 << 20);
    if (!(min_gain >= 0.0 && min_gain <= 10.0)) {
        throw ConfigError("min_gain must be in [0, 10] (got " + number(min_gain) + ")");
    }
    check_range("max_tokens_per_step", max_tokens_per_step, 0, kMaxTokensPerStep);
    check_range("probe_after", probe_after, 1, 1 << 20);
    check_range("probe_steps", probe_steps, 1, 1 << 20);
    check_range("tree_rows", tree_rows, 0, kMaxTreeRows);
}

void GenerationConfig::validate() const {
    if (max_new_tokens < 1) {
        throw ConfigError("max_new_tokens must be >= 1 (got " + std::to_string(max_new_tokens) +
                          ")");
    }
    for (size_t i = 0; i < stop_token_ids.size(); ++i) {
        if (stop_token_ids[i] < 0) {
            throw ConfigError("stop_token_ids[" + std::to_string(i) + "] must be >= 0 (got " +
                              std::to_string(stop_token_ids[i]) + ")");
        }
    }
    if (!(temperature >= 0.0) || !std::isfinite(temperature)) {
        throw ConfigError("temperature must be finite and >= 0 (got " + number(temperature) + ")");
    }
    if (top_k < 0) {
        throw ConfigError("top_k must be >= 0 (got " + std::to_string(top_k) + ")");
    }
    if (!(top_p > 0.0 && top_p <= 1.0)) {
        throw ConfigError("top_p must be in (0, 1] (got " + number(top_p) + ")");
    }
}

}  // namespace pylookahead
