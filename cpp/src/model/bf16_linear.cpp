#include "model/bf16_linear.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <cstring>

#include "check.h"
#include "kernels/cpu_isa.h"
#include "kernels/prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PYLA_HAVE_BF16_KERNEL 1
#define PYLA_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define PYLA_HAVE_BF16_KERNEL 0
#endif

namespace pylookahead {

namespace {

constexpr int64_t kBlock = 16;     // output columns per vector (one packed block)
constexpr int kMaxRows = 8;        // rows per register tile
constexpr int64_t kPrefetch = 32;  // k pairs ahead (2 KiB per weight stream)

#if PYLA_HAVE_BF16_KERNEL

// Rows [0, M) of x against NB consecutive packed blocks starting at block b0. The packed block b
// holds, for each k pair p, 16 columns x 2 values: w[16 b + l][2 p + j] at [p][l][j].
template <int M, int NB>
PYLA_BF16_TARGET inline void tile(const uint16_t* x, int64_t x_stride, int64_t kp_count,
                                  const uint16_t* packed, int64_t b0, const float* bias,
                                  uint16_t* y, int64_t y_stride, int64_t n) {
    __m512 acc[M][NB];
    for (int m = 0; m < M; ++m) {
        for (int b = 0; b < NB; ++b) acc[m][b] = _mm512_setzero_ps();
    }
    const uint16_t* w[NB];
    for (int b = 0; b < NB; ++b) w[b] = packed + (b0 + b) * kp_count * 2 * kBlock;
    const int64_t len = kp_count * 2 * kBlock * 2;  // one block's stream, bytes
    for (int64_t p = 0; p < kp_count; ++p) {
        __m512i wv[NB];
        for (int b = 0; b < NB; ++b) {
            wv[b] = _mm512_loadu_si512(w[b] + p * 2 * kBlock);
            prefetch_stream(w[b], (p + kPrefetch) * 2 * kBlock * 2, len, NB * len);
        }
        for (int m = 0; m < M; ++m) {
            int32_t pair;
            std::memcpy(&pair, x + m * x_stride + 2 * p, sizeof pair);
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
            for (int b = 0; b < NB; ++b)
                acc[m][b] = _mm512_dpbf16_ps(acc[m][b], xv, (__m512bh)wv[b]);
        }
    }
    for (int b = 0; b < NB; ++b) {
        const int64_t col = (b0 + b) * kBlock;
        const int64_t valid = std::min<int64_t>(kBlock, n - col);
        const __mmask16 keep = static_cast<__mmask16>((1u << valid) - 1u);
        const __m512 bv = bias ? _mm512_maskz_loadu_ps(keep, bias + col) : _mm512_setzero_ps();
        for (int m = 0; m < M; ++m) {
            const __m512 sum = bias ? _mm512_add_ps(acc[m][b], bv) : acc[m][b];
            const __m256i out = (__m256i)_mm512_cvtneps_pbh(sum);
            _mm256_mask_storeu_epi16(y + m * y_stride + col, keep, out);
        }
    }
}

// Every row of x against blocks [b0, b1): tiles of up to 8 rows (the weights stay in cache
// between row tiles) x NB blocks.
template <int NB>
PYLA_BF16_TARGET void run_blocks(const uint16_t* x, int64_t rows, int64_t x_stride,
                                 int64_t kp_count, const uint16_t* packed, int64_t b0, int64_t b1,
                                 const float* bias, uint16_t* y, int64_t n) {
    for (int64_t b = b0; b < b1; b += NB) {
        const bool full = b + NB <= b1;
        for (int64_t r = 0; r < rows; r += kMaxRows) {
            const int m = static_cast<int>(std::min<int64_t>(kMaxRows, rows - r));
            const uint16_t* xr = x + r * x_stride;
            uint16_t* yr = y + r * n;
            if (!full) {
                for (int64_t bb = b; bb < b1; ++bb) {
                    switch (m) {
                        // clang-format off
#define PYLA_CASE(M) case M: tile<M, 1>(xr, x_stride, kp_count, packed, bb, bias, yr, n, n); break;
                        PYLA_CASE(1) PYLA_CASE(2) PYLA_CASE(3) PYLA_CASE(4)
                        PYLA_CASE(5) PYLA_CASE(6) PYLA_CASE(7) PYLA_CASE(8)
#undef PYLA_CASE
                        // clang-format on
                    }
                }
                continue;
            }
            switch (m) {
                // clang-format off
#define PYLA_CASE(M) case M: tile<M, NB>(xr, x_stride, kp_count, packed, b, bias, yr, n, n); break;
                PYLA_CASE(1) PYLA_CASE(2) PYLA_CASE(3) PYLA_CASE(4)
                PYLA_CASE(5) PYLA_CASE(6) PYLA_CASE(7) PYLA_CASE(8)
#undef PYLA_CASE
                // clang-format on
            }
        }
    }
}

#endif  // PYLA_HAVE_BF16_KERNEL

}  // namespace

bool bf16_linear_supported() {
#if PYLA_HAVE_BF16_KERNEL
    return cpu_isa() >= CpuIsa::kAvx512Bf16;
#else
    return false;
#endif
}

at::Tensor bf16_linear_pack(const at::Tensor& weight) {
    PYLA_CHECK(
        weight.dim() == 2 && weight.scalar_type() == at::kBFloat16 && weight.size(1) % 2 == 0,
        "bf16_linear_pack needs a bf16 [N, K] weight with an even K");
    const int64_t n = weight.size(0), k = weight.size(1);
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    at::Tensor padded = at::zeros({blocks * kBlock, k}, weight.options());
    padded.narrow(0, 0, n).copy_(weight);
    // [blocks, 16, K/2, 2] -> [blocks, K/2, 16, 2]
    return padded.view({blocks, kBlock, k / 2, 2}).permute({0, 2, 1, 3}).contiguous();
}

at::Tensor bf16_linear(const at::Tensor& x, const at::Tensor& packed, int64_t n,
                       const at::Tensor& bias) {
    RECORD_FUNCTION("pylookahead::bf16_linear", std::vector<c10::IValue>());
    PYLA_CHECK(bf16_linear_supported(), "bf16_linear needs AVX512-BF16");
    PYLA_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.stride(1) == 1 &&
                   packed.dim() == 4 && x.size(1) == packed.size(1) * 2,
               "bf16_linear shapes");
    const int64_t rows = x.size(0), kp_count = packed.size(1), blocks = packed.size(0);
    at::Tensor y = at::empty({rows, n}, x.options());
    if (rows == 0) return y;
    // The engine hands over fp32 biases (converted once at load); others are converted here.
    at::Tensor bias_f;
    if (bias.defined()) {
        bias_f =
            bias.scalar_type() == at::kFloat ? bias.contiguous() : bias.to(at::kFloat).contiguous();
    }
#if PYLA_HAVE_BF16_KERNEL
    const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
    const auto* wp = reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>());
    auto* yp = reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>());
    const float* bp = bias_f.defined() ? bias_f.data_ptr<float>() : nullptr;
    const int64_t x_stride = x.stride(0);
    // Column blocks split among threads. Blocks per tile: as many independent weight streams as
    // the registers allow (M x NB accumulators <= 24).
    const int nb = rows == 1 ? 8 : rows <= 5 ? 4 : 3;
    const int64_t groups = (blocks + nb - 1) / nb;
    at::parallel_for(0, groups, std::max<int64_t>(1, 16 / nb), [&](int64_t begin, int64_t end) {
        const int64_t b0 = begin * nb, b1 = std::min(blocks, end * nb);
        switch (nb) {
            case 8: run_blocks<8>(xp, rows, x_stride, kp_count, wp, b0, b1, bp, yp, n); break;
            case 4: run_blocks<4>(xp, rows, x_stride, kp_count, wp, b0, b1, bp, yp, n); break;
            default: run_blocks<3>(xp, rows, x_stride, kp_count, wp, b0, b1, bp, yp, n); break;
        }
    });
#endif
    return y;
}

}  // namespace pylookahead
