#include "kernels/int8_dot_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "kernels/fma_linear.h"
#include "kernels/prefetch.h"
#include "kernels/quant_format.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PYLA_HAVE_X86_PATHS 1
#else
#define PYLA_HAVE_X86_PATHS 0
#endif

namespace pylookahead {

namespace {

constexpr int64_t kRec = 544;  // bytes of one (block, group) record (quant_format.h)
constexpr int64_t kHead = 32;  // its fp16 d[16], before the values q[8][16][4]
constexpr int64_t kLanes = kQuantBlock;
constexpr int64_t kAhead = 4;  // groups prefetched ahead in each block's stream

// A call's activations, quantized once per call (and thread): row r's values at q + r * k, the
// scale and value sum of its group g at [r * groups + g].
struct Acts {
    const int8_t* q = nullptr;
    const float* da = nullptr;
    const int32_t* qsum = nullptr;
    int64_t k = 0, groups = 0;

    // Inputs 32 g + 4 j .. + 3 of row r, as one 32-bit lane.
    int32_t four(int64_t r, int64_t g, int64_t j) const {
        int32_t v;
        std::memcpy(&v, q + r * k + g * kQuantGroup + j * 4, sizeof v);
        return v;
    }
    float scale(int64_t r, int64_t g) const { return da[r * groups + g]; }
    int32_t sum(int64_t r, int64_t g) const { return qsum[r * groups + g]; }
};

// The scratch of one thread's calls (reused: a decode step makes ~120 calls per thread).
struct ActScratch {
    std::vector<int8_t> q;
    std::vector<float> da;
    std::vector<int32_t> qsum;
};

Acts quantize_rows(const float* x, int64_t rows, int64_t x_stride, int64_t k) {
    thread_local ActScratch s;
    const int64_t groups = k / kQuantGroup;
    s.q.resize(rows * k);
    s.da.resize(rows * groups);
    s.qsum.resize(rows * groups);
    for (int64_t r = 0; r < rows; ++r)
        int8_dot_quantize_row(x + r * x_stride, k, s.q.data() + r * k, s.da.data() + r * groups,
                              s.qsum.data() + r * groups);
    return {s.q.data(), s.da.data(), s.qsum.data(), k, groups};
}

uint16_t u16_at(const unsigned char* p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// ---- generic: scalar, in the contract's own words.
void generic_blocks(const Acts& a, int64_t rows, const unsigned char* packed, int64_t b0,
                    int64_t b1, const float* bias, float* y, int64_t y_stride, int64_t n) {
    std::vector<float> acc(rows * kLanes);
    float dw[kLanes];
    for (int64_t b = b0; b < b1; ++b) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t g = 0; g < a.groups; ++g) {
            const unsigned char* rec = packed + (b * a.groups + g) * kRec;
            for (int64_t l = 0; l < kLanes; ++l) dw[l] = fp16_to_float(u16_at(rec + l * 2));
            for (int64_t r = 0; r < rows; ++r) {
                const int8_t* qa = a.q + r * a.k + g * kQuantGroup;
                for (int64_t l = 0; l < kLanes; ++l) {
                    int32_t isum = 0;
                    for (int64_t i = 0; i < kQuantGroup; ++i) {
                        const auto qw =
                            static_cast<int8_t>(rec[kHead + (i / 4) * kLanes * 4 + l * 4 + i % 4]);
                        isum += static_cast<int32_t>(qw) * qa[i];
                    }
                    const float t = static_cast<float>(isum) * (dw[l] * a.scale(r, g));
                    acc[r * kLanes + l] = acc[r * kLanes + l] + t;
                }
            }
        }
        for (int64_t l = 0; l < kLanes; ++l) {
            const int64_t c = b * kLanes + l;
            if (c >= n) break;
            for (int64_t r = 0; r < rows; ++r)
                y[r * y_stride + c] = bias ? acc[r * kLanes + l] + bias[c] : acc[r * kLanes + l];
        }
    }
}

#if PYLA_HAVE_X86_PATHS
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// ---- vnni: one block (16 columns) per zmm; VPDPBUSD multiplies unsigned by signed bytes, so the
// weights are read as q + 128 (q ^ 0x80) and the group's 128 * sum(a) taken off the int32 sum.
#define PYLA_VNNI_TARGET \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
constexpr int kVnniRows = 8;  // rows per tile

// Rows [r0, r0 + M) against blocks [blk, blk + NB).
template <int M, int NB>
PYLA_VNNI_TARGET void vnni_tile(const Acts& a, int64_t r0, const unsigned char* packed, int64_t blk,
                                const float* bias, float* y, int64_t y_stride, int64_t n) {
    __m512 acc[M][NB];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
#pragma GCC unroll 8
        for (int b = 0; b < NB; ++b) acc[m][b] = _mm512_setzero_ps();
    }
    const unsigned char* w[NB];
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) w[b] = packed + (blk + b) * a.groups * kRec;
    const int64_t len = a.groups * kRec;  // one block's stream
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int64_t g = 0; g < a.groups; ++g) {
#pragma GCC unroll 8
        for (int b = 0; b < NB; ++b) {
            for (int64_t line = 0; line < kRec; line += 64)
                prefetch_stream(w[b], (g + kAhead) * kRec + line, len, NB * len);
        }
        __m512i s[M][NB];
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
#pragma GCC unroll 8
            for (int b = 0; b < NB; ++b) s[m][b] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (int64_t j = 0; j < 8; ++j) {
            __m512i wv[NB];
#pragma GCC unroll 8
            for (int b = 0; b < NB; ++b)
                wv[b] = _mm512_xor_si512(
                    _mm512_loadu_si512(w[b] + g * kRec + kHead + j * kLanes * 4), flip);
#pragma GCC unroll 8
            for (int m = 0; m < M; ++m) {
                const __m512i av = _mm512_set1_epi32(a.four(r0 + m, g, j));
#pragma GCC unroll 8
                for (int b = 0; b < NB; ++b) s[m][b] = _mm512_dpbusd_epi32(s[m][b], wv[b], av);
            }
        }
#pragma GCC unroll 8
        for (int b = 0; b < NB; ++b) {
            const __m512 dw = _mm512_cvtph_ps(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b] + g * kRec)));
#pragma GCC unroll 8
            for (int m = 0; m < M; ++m) {
                const __m512i isum =
                    _mm512_sub_epi32(s[m][b], _mm512_set1_epi32(128 * a.sum(r0 + m, g)));
                const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(a.scale(r0 + m, g)));
                acc[m][b] =
                    _mm512_add_ps(acc[m][b], _mm512_mul_ps(_mm512_cvtepi32_ps(isum), scale));
            }
        }
    }
    for (int b = 0; b < NB; ++b) {
        const int64_t col = (blk + b) * kLanes;
        const int64_t valid = std::min<int64_t>(kLanes, n - col);
        if (valid <= 0) continue;
        const __mmask16 keep = static_cast<__mmask16>((1u << valid) - 1);
        const __m512 bv = bias ? _mm512_maskz_loadu_ps(keep, bias + col) : _mm512_setzero_ps();
        for (int m = 0; m < M; ++m) {
            const __m512 out = bias ? _mm512_add_ps(acc[m][b], bv) : acc[m][b];
            _mm512_mask_storeu_ps(y + (r0 + m) * y_stride + col, keep, out);
        }
    }
}

PYLA_VNNI_TARGET void vnni_any(int m, int nb, const Acts& a, int64_t r0,
                               const unsigned char* packed, int64_t blk, const float* bias,
                               float* y, int64_t y_stride, int64_t n) {
#define PYLA_CASE(NB, M) \
    case NB * 16 + M: return vnni_tile<M, NB>(a, r0, packed, blk, bias, y, y_stride, n);
    switch (nb * 16 + m) {
        PYLA_CASE(4, 1)
        PYLA_CASE(4, 2)
        PYLA_CASE(2, 3)
        PYLA_CASE(2, 4)
        PYLA_CASE(1, 1)
        PYLA_CASE(1, 2)
        PYLA_CASE(1, 3)
        PYLA_CASE(1, 4)
        PYLA_CASE(1, 5)
        PYLA_CASE(1, 6)
        PYLA_CASE(1, 7)
        PYLA_CASE(1, 8)
    }
#undef PYLA_CASE
    PYLA_CHECK(false, "int8_dot_linear: no vnni tile of " << m << " rows x " << nb << " blocks");
}

// Blocks per tile at `rows` (<= kVnniRows): the accumulators, the group sums and the weights'
// vectors within the 32 zmm.
int vnni_blocks_per_tile(int64_t rows) { return rows <= 2 ? 4 : rows <= 4 ? 2 : 1; }

// ---- avx2 and avxvnni: the ymm tiles (int8_dot_avx2_tiles.inc), with and without AVX-VNNI.
namespace avx2 {
#define PYLA_TILE_TARGET __attribute__((target("avx2,fma,f16c")))
constexpr bool kDpbusd = false;
#include "kernels/int8_dot_avx2_tiles.inc"
#undef PYLA_TILE_TARGET
}  // namespace avx2

namespace avxvnni {
#define PYLA_TILE_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
constexpr bool kDpbusd = true;
#include "kernels/int8_dot_avx2_tiles.inc"
#undef PYLA_TILE_TARGET
}  // namespace avxvnni

#pragma GCC diagnostic pop
#endif

bool cpu_has_vnni() {
#if PYLA_HAVE_X86_PATHS
    static const bool has = __builtin_cpu_supports("avx512vnni") != 0;
    return has;
#else
    return false;
#endif
}

bool cpu_has_avx_vnni() {
#if PYLA_HAVE_X86_PATHS
    static const bool has = __builtin_cpu_supports("avxvnni") != 0;
    return has;
#else
    return false;
#endif
}

// Units [u0, u1) (blocks or slices) for every row: tiles of `per_tile` units (then single units
// for the rest) by tiles of up to `max_rows` rows; the rows' tiles of one unit tile run one after
// the other, so its weights come from memory once and then from cache.
template <typename Tile>
void run_tiles(int64_t rows, int max_rows, int per_tile, int64_t u0, int64_t u1, Tile tile) {
    auto all_rows = [&](int nb, int64_t u) {
        for (int64_t r0 = 0; r0 < rows; r0 += max_rows)
            tile(static_cast<int>(std::min<int64_t>(max_rows, rows - r0)), nb, r0, u);
    };
    int64_t u = u0;
    for (; u + per_tile <= u1; u += per_tile) all_rows(per_tile, u);
    for (; u < u1; ++u) all_rows(1, u);
}

}  // namespace

void int8_dot_quantize_row(const float* x, int64_t k, int8_t* q, float* da, int32_t* qsum) {
    // Adding and taking off 1.5 * 2^23 rounds |v| <= 2^22 to the nearest integer, ties to even
    // (the float's last place there is 1), in the default rounding mode.
    constexpr float kRound = 12582912.0f;
    for (int64_t g = 0; g < k / kQuantGroup; ++g) {
        const float* v = x + g * kQuantGroup;
        float amax = 0.0f;
        for (int64_t i = 0; i < kQuantGroup; ++i) amax = std::max(amax, std::fabs(v[i]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        for (int64_t i = 0; i < kQuantGroup; ++i) {
            const float t = v[i] * id;
            int32_t qi = 0;
            if (t == t)
                qi = static_cast<int32_t>((std::clamp(t, -127.0f, 127.0f) + kRound) - kRound);
            q[g * kQuantGroup + i] = static_cast<int8_t>(qi);
            sum += qi;
        }
        da[g] = d;
        qsum[g] = sum;
    }
}

namespace {

enum class Kind { kVnni, kAvxVnni, kAvx2, kGeneric };
constexpr const char* kKindNames[] = {"vnni", "avxvnni", "avx2", "generic"};  // by Kind

Kind kind_of(CpuIsa path) {
    if (PYLA_HAVE_X86_PATHS && path == CpuIsa::kAvx512 && cpu_has_vnni()) return Kind::kVnni;
    if (PYLA_HAVE_X86_PATHS && path >= CpuIsa::kAvx2 && cpu_has_avx_vnni()) return Kind::kAvxVnni;
    if (PYLA_HAVE_X86_PATHS && path >= CpuIsa::kAvx2) return Kind::kAvx2;
    return Kind::kGeneric;
}

void run(Kind kind, const float* x, int64_t rows, int64_t x_stride, int64_t k, const void* packed,
         int64_t b0, int64_t b1, const float* bias, float* y, int64_t y_stride, int64_t n) {
    PYLA_CHECK(k > 0 && k % kQuantGroup == 0,
               "int8_dot_linear_blocks: k must be a positive multiple of 32 (got " << k << ")");
    if (rows <= 0 || b0 >= b1) return;
    const Acts a = quantize_rows(x, rows, x_stride, k);
    const auto* w = static_cast<const unsigned char*>(packed);
#if PYLA_HAVE_X86_PATHS
    if (kind == Kind::kVnni) {
        return run_tiles(rows, kVnniRows, vnni_blocks_per_tile(std::min<int64_t>(rows, kVnniRows)),
                         b0, b1, [&](int m, int nb, int64_t r0, int64_t blk) {
                             vnni_any(m, nb, a, r0, w, blk, bias, y, y_stride, n);
                         });
    }
    if (kind == Kind::kAvxVnni || kind == Kind::kAvx2) {
        // Both ymm kinds tile alike (int8_dot_avx2_tiles.inc): slices of 8 columns, two a block.
        const auto tile_any = kind == Kind::kAvxVnni ? avxvnni::tile_any : avx2::tile_any;
        static_assert(avxvnni::kRows == avx2::kRows, "the ymm kinds share their tile shapes");
        return run_tiles(rows, avx2::kRows,
                         avx2::slices_per_tile(std::min<int64_t>(rows, avx2::kRows)), b0 * 2,
                         b1 * 2, [&](int m, int ns, int64_t r0, int64_t s0) {
                             tile_any(m, ns, a, r0, w, s0, bias, y, y_stride, n);
                         });
    }
#else
    (void)kind;
#endif
    generic_blocks(a, rows, w, b0, b1, bias, y, y_stride, n);
}

}  // namespace

const char* int8_dot_linear_kind(CpuIsa path) {
    return kKindNames[static_cast<int>(kind_of(path))];
}

std::vector<std::string> int8_dot_linear_kinds_here() {
    std::vector<std::string> kinds = {"generic"};
    const CpuIsa path = fma_linear_path(cpu_isa());
    if (PYLA_HAVE_X86_PATHS && path >= CpuIsa::kAvx2) kinds.push_back("avx2");
    if (PYLA_HAVE_X86_PATHS && path >= CpuIsa::kAvx2 && cpu_has_avx_vnni())
        kinds.push_back("avxvnni");
    if (PYLA_HAVE_X86_PATHS && path == CpuIsa::kAvx512 && cpu_has_vnni()) kinds.push_back("vnni");
    return kinds;
}

void int8_dot_linear_blocks_as(const std::string& kind, const float* x, int64_t rows,
                               int64_t x_stride, int64_t k, const void* packed, int64_t b0,
                               int64_t b1, const float* bias, float* y, int64_t y_stride,
                               int64_t n) {
    const std::vector<std::string> here = int8_dot_linear_kinds_here();
    PYLA_CHECK(std::find(here.begin(), here.end(), kind) != here.end(),
               "int8_dot_linear: this CPU (or its cap) does not run '" << kind << "'");
    const auto* name = std::find(std::begin(kKindNames), std::end(kKindNames), kind);
    run(static_cast<Kind>(name - std::begin(kKindNames)), x, rows, x_stride, k, packed, b0, b1,
        bias, y, y_stride, n);
}

void int8_dot_linear_blocks(CpuIsa path, const float* x, int64_t rows, int64_t x_stride, int64_t k,
                            const void* packed, int64_t b0, int64_t b1, const float* bias, float* y,
                            int64_t y_stride, int64_t n) {
    PYLA_CHECK(path == fma_linear_path(path),
               "int8_dot_linear_blocks: no path " << cpu_isa_name(path));
    run(kind_of(path), x, rows, x_stride, k, packed, b0, b1, bias, y, y_stride, n);
}

}  // namespace pylookahead
