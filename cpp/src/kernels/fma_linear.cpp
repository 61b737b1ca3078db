#include "kernels/fma_linear.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "check.h"
#include "kernels/int8_dot_linear.h"
#include "kernels/prefetch.h"
#include "kernels/quant_format.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PYLA_HAVE_AVX2_PATH 1
#else
#define PYLA_HAVE_AVX2_PATH 0
#endif

namespace pylookahead {

namespace {

// 8 floats: two xmm (SSE2) or two NEON registers on the generic path, one ymm on the avx2 path.
typedef float V __attribute__((vector_size(kFmaLinearBlock * sizeof(float))));
typedef uint16_t U16x8 __attribute__((vector_size(kFmaLinearBlock * sizeof(uint16_t))));
typedef uint32_t U32x8 __attribute__((vector_size(kFmaLinearBlock * sizeof(uint32_t))));
typedef int8_t I8x8 __attribute__((vector_size(kFmaLinearBlock * sizeof(int8_t))));
typedef uint8_t U8x8 __attribute__((vector_size(kFmaLinearBlock * sizeof(uint8_t))));
typedef int32_t I32x8 __attribute__((vector_size(kFmaLinearBlock * sizeof(int32_t))));

constexpr int64_t kPrefetchLines = 32;  // cache lines ahead in each weight stream (2 KiB)

constexpr int64_t bytes_of(WeightFormat f) { return f == WeightFormat::kF32 ? 4 : 2; }

// x in every lane (a broadcast: no arithmetic, so -0.0 stays -0.0).
inline __attribute__((always_inline)) V splat(float x) {
    V v;
    for (int64_t l = 0; l < kFmaLinearBlock; ++l) v[l] = x;
    return v;
}

// bf16 is the top half of an fp32: widen by a 16-bit shift (exact).
inline __attribute__((always_inline)) V widen_bf16(const unsigned char* p) {
    U16x8 h;
    std::memcpy(&h, p, sizeof h);
    const U32x8 u = __builtin_convertvector(h, U32x8) << 16;
    V f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// `rows` split into the fewest passes of at most `max_rows` rows, as even as possible (8 rows at
// 6: 4 + 4, not 6 + 2): a pass of few rows has too few independent accumulator chains to keep
// both FMA pipes busy (an FMA's latency is about 4 of its issue slots), so a thin last pass costs
// nearly as much as a full one. Which rows a pass holds never changes an output's bits.
struct EvenPasses {
    EvenPasses(int64_t rows, int max_rows) : rows(rows), count((rows + max_rows - 1) / max_rows) {}
    // The tallest pass (the first ones).
    int64_t height() const { return (rows + count - 1) / count; }
    // Rows in pass p: the first (rows % count) passes take one row more than the others.
    int rows_in(int64_t p) const { return static_cast<int>(rows / count + (p < rows % count)); }

    int64_t rows;
    int64_t count;
};

// The sum of a group's 32 inputs, left to right (scalar: the same bits on every path).
inline float group_sum(const float* x) {
    float sum = 0.0f;
    for (int i = 0; i < 32; ++i) sum += x[i];
    return sum;
}

// ---- generic: plain vector code, product and sum unfused (this file is built with
// -ffp-contract=off, so the compiler may not fuse them in some tiles and not in others).
namespace generic {
#define PYLA_TILE_TARGET
constexpr int64_t kLanes = kFmaLinearBlock;
constexpr bool kReadsF16 = false;
inline __attribute__((always_inline)) V madd(V acc, V x, V w) { return acc + x * w; }
template <WeightFormat F>
inline __attribute__((always_inline)) V load_w(const unsigned char* base, int64_t i) {
    V f;
    if constexpr (F == WeightFormat::kF32) {
        std::memcpy(&f, base + i * 4, sizeof f);
    } else {
        static_assert(F == WeightFormat::kBF16, "the generic path reads fp16 packed as fp32");
        f = widen_bf16(base + i * 2);
    }
    return f;
}
// fp16 -> fp32 without a conversion instruction: the 15 magnitude bits moved to fp32's
// exponent/mantissa place read 2^-112 times the value (normal and subnormal alike), so one
// multiply by 2^112 is exact; then the sign. (Scales are finite.)
inline __attribute__((always_inline)) V load_scales(const unsigned char* p) {
    U16x8 h;
    std::memcpy(&h, p, sizeof h);
    const U32x8 u = __builtin_convertvector(h, U32x8);
    const U32x8 mag = (u & 0x7fffu) << 13;
    V f;
    std::memcpy(&f, &mag, sizeof f);
    f = f * splat(0x1p112f);
    U32x8 bits;
    std::memcpy(&bits, &f, sizeof bits);
    bits |= (u & 0x8000u) << 16;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}
inline __attribute__((always_inline)) V load_q8(const unsigned char* p) {
    I8x8 q;
    std::memcpy(&q, p, sizeof q);
    return __builtin_convertvector(__builtin_convertvector(q, I32x8), V);
}
inline __attribute__((always_inline)) void load_q4(const unsigned char* p, V* lo, V* hi) {
    U8x8 b;
    std::memcpy(&b, p, sizeof b);
    const I32x8 q = __builtin_convertvector(b, I32x8);
    *lo = __builtin_convertvector(q & 0xf, V);
    *hi = __builtin_convertvector(q >> 4, V);
}
#include "kernels/fma_linear_qtiles.inc"
#include "kernels/fma_linear_tiles.inc"
#undef PYLA_TILE_TARGET
}  // namespace generic

#if PYLA_HAVE_AVX2_PATH
// ---- avx2: one fused multiply-add per weight and row (VFMADD231PS), F16C for fp16 weights.
namespace avx2 {
#define PYLA_TILE_TARGET __attribute__((target("avx2,fma,f16c")))
constexpr int64_t kLanes = kFmaLinearBlock;
constexpr bool kReadsF16 = true;
PYLA_TILE_TARGET inline __attribute__((always_inline)) V madd(V acc, V x, V w) {
    return (V)_mm256_fmadd_ps((__m256)x, (__m256)w, (__m256)acc);
}
template <WeightFormat F>
PYLA_TILE_TARGET inline __attribute__((always_inline)) V load_w(const unsigned char* base,
                                                                int64_t i) {
    if constexpr (F == WeightFormat::kF32) {
        return (V)_mm256_loadu_ps(reinterpret_cast<const float*>(base) + i);
    } else if constexpr (F == WeightFormat::kF16) {
        return (V)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i * 2)));
    } else {
        // VPMOVZXWD from memory, then the shift (widen_bf16's vector code compiles to four
        // 128-bit shuffles here, the bottleneck of a 1-row step).
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i * 2));
        return (V)_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    }
}
PYLA_TILE_TARGET inline __attribute__((always_inline)) V load_scales(const unsigned char* p) {
    return (V)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
PYLA_TILE_TARGET inline __attribute__((always_inline)) V load_q8(const unsigned char* p) {
    return (V)_mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
PYLA_TILE_TARGET inline __attribute__((always_inline)) void load_q4(const unsigned char* p, V* lo,
                                                                    V* hi) {
    const __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    *lo = (V)_mm256_cvtepi32_ps(_mm256_and_si256(q, _mm256_set1_epi32(0xf)));
    *hi = (V)_mm256_cvtepi32_ps(_mm256_srli_epi32(q, 4));
}
#include "kernels/fma_linear_qtiles.inc"
#include "kernels/fma_linear_tiles.inc"
#undef PYLA_TILE_TARGET
}  // namespace avx2

// ---- avx512: the avx2 path's operations on 16 lanes (a quantized block, or a pair of float
// blocks, per vector); VFMADD231PS per lane is the same IEEE operation at either width.
// (GCC 12 warns of `__Y` in its own AVX-512 headers: _mm512_undefined_* read as uninitialized.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace avx512 {
#define PYLA_TILE_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
constexpr int64_t kLanes = 16;
typedef float V __attribute__((vector_size(kLanes * sizeof(float))));
PYLA_TILE_TARGET inline __attribute__((always_inline)) V splat(float x) {
    return (V)_mm512_set1_ps(x);
}
PYLA_TILE_TARGET inline __attribute__((always_inline)) V madd(V acc, V x, V w) {
    return (V)_mm512_fmadd_ps((__m512)x, (__m512)w, (__m512)acc);
}
PYLA_TILE_TARGET inline __attribute__((always_inline)) V load_scales(const unsigned char* p) {
    return (V)_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
PYLA_TILE_TARGET inline __attribute__((always_inline)) V load_q8(const unsigned char* p) {
    return (V)_mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
PYLA_TILE_TARGET inline __attribute__((always_inline)) void load_q4(const unsigned char* p, V* lo,
                                                                    V* hi) {
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    *lo = (V)_mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(0xf)));
    *hi = (V)_mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4));
}
#include "kernels/fma_linear_pair_tiles.inc"
#include "kernels/fma_linear_qtiles.inc"
#undef PYLA_TILE_TARGET
}  // namespace avx512
#pragma GCC diagnostic pop
#endif

}  // namespace

CpuIsa fma_linear_path(CpuIsa isa) {
#if PYLA_HAVE_AVX2_PATH
    if (isa >= CpuIsa::kAvx512) return CpuIsa::kAvx512;
    return isa >= CpuIsa::kAvx2 ? CpuIsa::kAvx2 : CpuIsa::kGeneric;
#else
    (void)isa;
    return CpuIsa::kGeneric;
#endif
}

bool fma_linear_reads(CpuIsa path, WeightFormat format) {
    return format != WeightFormat::kF16 || path != CpuIsa::kGeneric;
}

void fma_linear_blocks(CpuIsa path, WeightFormat format, const float* x, int64_t rows,
                       int64_t x_stride, int64_t k, const void* packed, int64_t b0, int64_t b1,
                       const float* bias, float* y, int64_t y_stride, int64_t n) {
    PYLA_CHECK(path == fma_linear_path(path), "fma_linear_blocks: no path " << cpu_isa_name(path));
    PYLA_CHECK(fma_linear_reads(path, format), "fma_linear_blocks: the "
                                                   << cpu_isa_name(path)
                                                   << " path does not read fp16 weights");
    PYLA_CHECK(!is_quantized(format) || k % 32 == 0,
               "fma_linear_blocks: quantized weights need k a multiple of 32 (got " << k << ")");
    if (rows <= 0 || b0 >= b1) return;
    if (format == WeightFormat::kQ8A8) {
        return int8_dot_linear_blocks(path, x, rows, x_stride, k, packed, b0, b1, bias, y, y_stride,
                                      n);
    }
#if PYLA_HAVE_AVX2_PATH
    if (path == CpuIsa::kAvx512) {
        if (is_quantized(format)) {
            return avx512::run_quantized(format, x, rows, x_stride, k, packed, b0, b1, bias, y,
                                         y_stride, n);
        }
        return avx512::run_float(format, x, rows, x_stride, k, packed, b0, b1, bias, y, y_stride,
                                 n);
    }
    if (path >= CpuIsa::kAvx2) {
        return avx2::run(format, x, rows, x_stride, k, packed, b0, b1, bias, y, y_stride, n);
    }
#endif
    generic::run(format, x, rows, x_stride, k, packed, b0, b1, bias, y, y_stride, n);
}

}  // namespace pylookahead
