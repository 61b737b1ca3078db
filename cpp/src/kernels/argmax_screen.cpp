#include "kernels/argmax_screen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "check.h"
#include "kernels/bf16.h"
#include "kernels/quant_format.h"

namespace pylookahead {

namespace {

// Round a non-negative double up to an fp32 that is >= it.
float round_up_to_float(double v) {
    const float f = static_cast<float>(v);
    return static_cast<double>(f) >= v ? f : std::nextafter(f, std::numeric_limits<float>::max());
}

}  // namespace

bool argmax_screen_pack(const float* w, int64_t cols, int64_t k, unsigned char* q8, float* beta) {
    PYLA_CHECK(cols >= 0 && k > 0 && k % kQuantGroup == 0,
               "argmax_screen_pack: W [" << cols << ", " << k << "]: k must be a multiple of 32");
    for (int64_t i = 0; i < cols * k; ++i) {
        if (!std::isfinite(w[i])) return false;
    }
    quant_pack(WeightFormat::kQ8, w, cols, k, q8);
    // The rounding factor g of the header, from the kernels' chain lengths.
    const double g = static_cast<double>(k + k / 16 + 64) * std::ldexp(1.0, -23);
    int8_t q[kQuantGroup];
    for (int64_t c = 0; c < cols; ++c) {
        double e = 0.0, m = 0.0;
        for (int64_t grp = 0; grp < k / kQuantGroup; ++grp) {
            uint16_t d16 = 0, m16 = 0;
            quant_get_group(WeightFormat::kQ8, q8, cols, k, c, grp, q, &d16, &m16);
            const double d = fp16_to_float(d16);
            for (int64_t i = 0; i < kQuantGroup; ++i) {
                const double v = w[c * k + grp * kQuantGroup + i];
                e = std::max(e, std::fabs(v - q[i] * d));
                m = std::max(m, std::fabs(v));
            }
        }
        beta[c] = round_up_to_float(e + g * (2.0 * m + e));
    }
    return true;
}

int32_t argmax_screen_pick(CpuIsa path, WeightFormat format, const void* packed, int64_t n,
                           int64_t k, const float* x, const float* approx, const float* beta,
                           bool round_bf16, int64_t max_candidates, float* scratch,
                           int64_t* candidates) {
    if (candidates) *candidates = 0;
    double l1 = 0.0;
    for (int64_t i = 0; i < k; ++i) {
        if (!std::isfinite(x[i])) return -1;
        l1 += std::fabs(static_cast<double>(x[i]));
    }
    // A sum of k non-negative doubles is within k * 2^-53 of its value; the bound is taken above it.
    l1 *= 1.0 + std::ldexp(static_cast<double>(k + 1), -52);
    // Pass 1: the largest lower bound (no column's exact value can beat a column's lower bound
    // without reaching it), the largest upper bound, and the magnitudes for the rounding margin.
    const double lowest = -std::numeric_limits<double>::infinity();
    double lower = lowest, upper = lowest, magnitude = 0.0;
    for (int64_t c = 0; c < n; ++c) {
        const double a = approx[c];
        if (!std::isfinite(a)) return -1;
        const double b = l1 * beta[c];
        lower = std::max(lower, a - b);
        upper = std::max(upper, a + b);
        magnitude = std::max(magnitude, std::fabs(a) + b);
    }
    if (!std::isfinite(upper) || !std::isfinite(magnitude) || magnitude > 1e30) return -1;
    // The exact maximum L_m lies in [lower, upper]. Two fp32 values that round to one bf16 differ
    // by less than 2^-7 of the larger magnitude, so with round_bf16 every column whose rounded
    // value may equal the rounded maximum has L_c >= lower - 2^-7 max(|lower|, |upper|). The
    // 2^-45 term covers the rounding of this pass's double sums.
    const double top = std::max(std::fabs(lower), std::fabs(upper));
    const double slack =
        (round_bf16 ? std::ldexp(top, -6) : 0.0) + std::ldexp(magnitude, -45) + 1e-30;
    const double threshold = lower - slack;
    // Pass 2: the candidates, ascending, and their blocks of the exact layout.
    std::vector<int32_t> cand;
    for (int64_t c = 0; c < n; ++c) {
        if (static_cast<double>(approx[c]) + l1 * beta[c] >= threshold) {
            if (static_cast<int64_t>(cand.size()) >= max_candidates) return -1;
            cand.push_back(static_cast<int32_t>(c));
        }
    }
    if (candidates) *candidates = static_cast<int64_t>(cand.size());
    if (cand.empty()) return -1;  // not reached while the bound holds (the maximum's own column)
    const int64_t cols = fma_linear_block_cols(format);
    int64_t last_block = -1;
    for (int32_t c : cand) {
        const int64_t b = c / cols;
        if (b == last_block) continue;
        fma_linear_blocks(path, format, x, 1, k, k, packed, b, b + 1, nullptr, scratch, n, n);
        last_block = b;
    }
    int32_t best = -1;
    float best_value = 0.0f;
    for (int32_t c : cand) {
        const float v = round_bf16 ? round_to_bf16(scratch[c]) : scratch[c];
        if (std::isnan(v)) return -1;
        if (best < 0 || v > best_value) {
            best = c;
            best_value = v;
        }
    }
    return best;
}

}  // namespace pylookahead
