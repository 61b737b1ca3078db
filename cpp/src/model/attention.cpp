#include "model/attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "check.h"
#include "kernels/bf16.h"
#include "kernels/cpu_isa.h"
#include "kv/kv_cache.h"

namespace pylookahead {

namespace {

// Every value below is computed by one fixed sequence of IEEE operations per element (this file
// is compiled with -ffp-contract=off, and nothing is reassociated), independent of how many rows,
// slots or threads a call has, so a row's result is a function of its own inputs only. The work
// is written with GCC vector extensions on each build's native width (below); a vector lane does
// exactly what the scalar code would, so the per-ISA builds (picked per call from cpu_isa(),
// which honours the PYLOOKAHEAD_CPU_ISA cap) even agree with each other.
#if defined(__GNUC__) && defined(__x86_64__)
#define PYLA_HAVE_ISA_BUILDS 1
#else
#define PYLA_HAVE_ISA_BUILDS 0
#endif
#define PYLA_INLINE inline __attribute__((always_inline))

constexpr int64_t kLanes = 16;  // slots per key block, and the unit dp and sp are rounded to
constexpr int kMaxHeads = 8;    // query heads per tile at most (GQA groups are split into tiles)

// The builds compute on native vectors V of W floats (GNU vector extension): 16 on AVX-512 (one
// zmm), 8 on AVX2 and the generic build (one ymm; two xmm or NEON registers), so no operation is
// split by the compiler; a 16-lane block of the layouts above is kLanes / W of them. Lane for lane
// the operations are the same in every build.
typedef float F16 __attribute__((vector_size(16 * sizeof(float))));
typedef int32_t I16 __attribute__((vector_size(16 * sizeof(int32_t))));
typedef float F8 __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t I8 __attribute__((vector_size(8 * sizeof(int32_t))));
template <typename V>
struct VecInt;
template <>
struct VecInt<F16> {
    typedef I16 type;
};
template <>
struct VecInt<F8> {
    typedef I8 type;
};
template <typename V>
constexpr int kWidth = static_cast<int>(sizeof(V) / sizeof(float));

// Query heads per tile: the score pass keeps one accumulator per head and 16-lane block, with the
// key block, within the 16 (AVX2) or 32 (AVX-512) vector registers.
template <typename V>
constexpr int heads_per_tile() {
    return kWidth<V> == 16 ? kMaxHeads : 4;
}

template <typename V>
PYLA_INLINE V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

template <typename V>
PYLA_INLINE void store(float* p, V v) {
    std::memcpy(p, &v, sizeof v);
}

template <typename V>
PYLA_INLINE V splat(float x) {
    return V{} + x;
}

int64_t round_up(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// exp(x) for x <= 0 (scores minus their maximum), one vector at a time: Cody-Waite range reduction
// x = n ln2 + r, |r| <= ln2 / 2, a degree-6 polynomial for e^r (about 1 ulp), then 2^n through
// the exponent bits. Below -87 it returns e^-87 (1.6e-38), which adds nothing next to the
// maximum's 1.
template <typename V>
PYLA_INLINE V exp_nonpositive(V x) {
    typedef typename VecInt<V>::type I;
    const V lo = splat<V>(-87.0f);
    x = x < lo ? lo : x;
    const V shifter = splat<V>(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
    const V t = x * splat<V>(1.44269504088896341f) + shifter;
    const V n = t - shifter;
    V r = x - n * splat<V>(0.693359375f);
    r = r - n * splat<V>(-2.12194440e-4f);
    const V r2 = r * r;
    V p = splat<V>(1.9875691500e-4f);
    p = p * r + splat<V>(1.3981999507e-3f);
    p = p * r + splat<V>(8.3334519073e-3f);
    p = p * r + splat<V>(4.1665795894e-2f);
    p = p * r + splat<V>(1.6666665459e-1f);
    p = p * r + splat<V>(5.0000001201e-1f);
    p = p * r2 + r + splat<V>(1.0f);
    I bits;
    std::memcpy(&bits, &t, sizeof bits);
    int32_t shifter_bits;
    const float shifter_f = 12582912.0f;
    std::memcpy(&shifter_bits, &shifter_f, sizeof shifter_bits);
    const I scale_bits = ((bits - shifter_bits) + 127) << 23;
    V scale;
    std::memcpy(&scale, &scale_bits, sizeof scale);
    return p * scale;
}

// Values of the weighted sum for NG heads over C vectors of W lanes from column i0:
// acc[g][c] = sum_e w[g][e] * v[slots[e]][i0 + c W + lane], e ascending; then out = acc / denom.
template <int NG, int C, typename V, typename T>
PYLA_INLINE void weigh_values(const float* vf, int64_t d, int64_t dp, int64_t sp,
                              const int32_t* slots, int64_t n, const float* sc, const float* denom,
                              int64_t i0, T* out, int64_t out_stride) {
    constexpr int W = kWidth<V>;
    V acc[NG][C];
#pragma GCC unroll 8
    for (int g = 0; g < NG; ++g) {
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[g][c] = V{};
    }
    for (int64_t e = 0; e < n; ++e) {
        const float* row = vf + static_cast<int64_t>(slots[e]) * dp + i0;
        V v[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) v[c] = load<V>(row + c * W);
#pragma GCC unroll 8
        for (int g = 0; g < NG; ++g) {
            const V w = splat<V>(sc[g * sp + e]);
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) acc[g][c] = acc[g][c] + v[c] * w;
        }
    }
    for (int g = 0; g < NG; ++g) {
        for (int c = 0; c < C; ++c) {
            const V o = acc[g][c] / splat<V>(denom[g]);
            T* dst = out + g * out_stride + i0 + c * W;
            const int64_t lanes = std::min<int64_t>(W, d - i0 - c * W);
            for (int64_t l = 0; l < lanes; ++l) dst[l] = static_cast<T>(o[l]);
        }
    }
}

// One (query row, KV head) of the kernel: NG query heads that share the KV head.
//   q      [NG, dp]   queries in fp32 (dp = head dim rounded up to 16, zero padded)
//   kt     [sp / 16, d, 16]  keys transposed in blocks of 16 slots, fp32 (sp = slot count
//                     rounded up to 16; slots past the count finite)
//   vf     [S, dp]    values, fp32 (zero padded)
//   slots  [n]        the slots this row sees, ascending
//   sc     [NG, sp]   scratch
//   out    NG rows of d values (stride out_stride), dtype T
template <int NG, typename V, typename T>
PYLA_INLINE void attend_tile(const float* q, const float* kt, const float* vf, int64_t d,
                             int64_t dp, int64_t sp, const int32_t* slots, int64_t n, float scale,
                             float* sc, T* out, int64_t out_stride) {
    constexpr int W = kWidth<V>;
    constexpr int kSub = kLanes / W;  // vectors per block of 16 lanes
    // Scores of every slot (visible or not, so that each is computed the same way):
    // sc[g][s] = (sum_i q[g][i] * k[s][i], i ascending) * scale.
    for (int64_t s0 = 0; s0 < sp; s0 += kLanes) {
        V acc[NG][kSub];
#pragma GCC unroll 8
        for (int g = 0; g < NG; ++g) {
#pragma GCC unroll 2
            for (int h = 0; h < kSub; ++h) acc[g][h] = V{};
        }
        const float* col = kt + s0 * d;  // the block of slots s0 .. s0 + 15
        for (int64_t i = 0; i < d; ++i) {
            V k[kSub];
#pragma GCC unroll 2
            for (int h = 0; h < kSub; ++h) k[h] = load<V>(col + i * kLanes + h * W);
#pragma GCC unroll 8
            for (int g = 0; g < NG; ++g) {
                const V qv = splat<V>(q[g * dp + i]);
#pragma GCC unroll 2
                for (int h = 0; h < kSub; ++h) acc[g][h] = acc[g][h] + k[h] * qv;
            }
        }
        for (int g = 0; g < NG; ++g) {
            for (int h = 0; h < kSub; ++h)
                store<V>(sc + g * sp + s0 + h * W, acc[g][h] * splat<V>(scale));
        }
    }
    // Softmax over the visible slots: compact them to the front (in slot order), subtract the
    // maximum, exponentiate, and sum in 16 lanes (lane l takes positions l, l+16, ...).
    const int64_t np = round_up(n);
    float denom[NG];
    for (int g = 0; g < NG; ++g) {
        float* p = sc + g * sp;
        for (int64_t e = 0; e < n; ++e) p[e] = p[slots[e]];  // slots[e] >= e: a left shift
        float m = p[0];
        for (int64_t e = 1; e < n; ++e) m = std::max(m, p[e]);
        for (int64_t e = n; e < np; ++e) p[e] = m;  // padding lanes, dropped below
        V part[kSub];
        for (int h = 0; h < kSub; ++h) part[h] = V{};
        for (int64_t e0 = 0; e0 < np; e0 += kLanes) {
            for (int h = 0; h < kSub; ++h) {
                V w = exp_nonpositive<V>(load<V>(p + e0 + h * W) - splat<V>(m));
                for (int64_t l = 0; l < W; ++l) {
                    if (e0 + h * W + l >= n) w[l] = 0.f;
                }
                store<V>(p + e0 + h * W, w);
                part[h] = part[h] + w;
            }
        }
        float total = 0.f;
        for (int h = 0; h < kSub; ++h) {
            for (int l = 0; l < W; ++l) total += part[h][l];
        }
        denom[g] = total;
    }
    // Weighted values: out[g][i] = (sum_e w[g][e] * v[slots[e]][i], e ascending) / denom[g].
    // A pass reads C vectors (up to a whole row) of each visible value row in turn, so the rows
    // stream through in slot order, with NG x C accumulators and C value vectors in registers.
    constexpr int C = W == 16 ? (NG <= 2 ? 8 : NG <= 4 ? 4 : NG <= 6 ? 2 : 1) : (NG <= 2 ? 4 : 2);
    const int64_t vectors = dp / W;  // dp is a multiple of 16
    int64_t c0 = 0;
    for (; c0 + C <= vectors; c0 += C)
        weigh_values<NG, C, V, T>(vf, d, dp, sp, slots, n, sc, denom, c0 * W, out, out_stride);
    for (; c0 < vectors; ++c0)
        weigh_values<NG, 1, V, T>(vf, d, dp, sp, slots, n, sc, denom, c0 * W, out, out_stride);
}

template <typename V, typename T>
PYLA_INLINE void attend_dispatch(int ng, const float* q, const float* kt, const float* vf,
                                 int64_t d, int64_t dp, int64_t sp, const int32_t* slots, int64_t n,
                                 float scale, float* sc, T* out, int64_t out_stride) {
    switch (ng) {
        // clang-format off
#define PYLA_TILE(G) \
    case G: return attend_tile<G, V, T>(q, kt, vf, d, dp, sp, slots, n, scale, sc, out, out_stride);
        PYLA_TILE(1) PYLA_TILE(2) PYLA_TILE(3) PYLA_TILE(4)
#undef PYLA_TILE
        // clang-format on
    }
    if constexpr (heads_per_tile<V>() > 4) {
        switch (ng) {
            // clang-format off
#define PYLA_TILE(G) \
    case G: return attend_tile<G, V, T>(q, kt, vf, d, dp, sp, slots, n, scale, sc, out, out_stride);
            PYLA_TILE(5) PYLA_TILE(6) PYLA_TILE(7) PYLA_TILE(8)
#undef PYLA_TILE
            // clang-format on
        }
    }
    PYLA_CHECK(false, "attention: no tile of " << ng << " heads");
}

// The per-ISA entry points: one build of attend_dispatch<T> per target, chosen per call.
#define PYLA_ATTEND_BUILD(NAME, V, TARGET)                                                     \
    template <typename T>                                                                      \
    TARGET void NAME(int ng, const float* q, const float* kt, const float* vf, int64_t d,      \
                     int64_t dp, int64_t sp, const int32_t* slots, int64_t n, float scale,     \
                     float* sc, T* out, int64_t out_stride) {                                  \
        attend_dispatch<V, T>(ng, q, kt, vf, d, dp, sp, slots, n, scale, sc, out, out_stride); \
    }
PYLA_ATTEND_BUILD(attend_generic, F8, )
#if PYLA_HAVE_ISA_BUILDS
PYLA_ATTEND_BUILD(attend_avx2, F8, __attribute__((target("arch=x86-64-v3"))))
PYLA_ATTEND_BUILD(attend_avx512, F16, __attribute__((target("arch=x86-64-v4"))))
#endif
#undef PYLA_ATTEND_BUILD

// Query heads per tile of the build attend() takes (its ng is at most this).
int attend_heads_per_tile() {
#if PYLA_HAVE_ISA_BUILDS
    static const CpuIsa isa = cpu_isa();
    if (isa >= CpuIsa::kAvx512) return heads_per_tile<F16>();
#endif
    return heads_per_tile<F8>();
}

template <typename T>
void attend(int ng, const float* q, const float* kt, const float* vf, int64_t d, int64_t dp,
            int64_t sp, const int32_t* slots, int64_t n, float scale, float* sc, T* out,
            int64_t out_stride) {
#if PYLA_HAVE_ISA_BUILDS
    static const CpuIsa isa = cpu_isa();
    if (isa >= CpuIsa::kAvx512) {
        return attend_avx512<T>(ng, q, kt, vf, d, dp, sp, slots, n, scale, sc, out, out_stride);
    }
    if (isa >= CpuIsa::kAvx2) {
        return attend_avx2<T>(ng, q, kt, vf, d, dp, sp, slots, n, scale, sc, out, out_stride);
    }
#endif
    attend_generic<T>(ng, q, kt, vf, d, dp, sp, slots, n, scale, sc, out, out_stride);
}

// dtype -> fp32 (exact for every dtype here). bf16 is the top half of an fp32.
PYLA_INLINE float to_f32(float x) { return x; }
PYLA_INLINE float to_f32(at::Half x) { return static_cast<float>(x); }
PYLA_INLINE float to_f32(at::BFloat16 x) { return bf16_bits_to_float(x.x); }

template <typename T>
void run_fp32(const at::Tensor& q, const KvCache& kv, int layer, int64_t kv_len,
              const uint8_t* mask, const std::vector<int32_t>& rows, double scale,
              at::Tensor& out) {
    const KvCache::Widened w = kv.widened(layer);
    PYLA_CHECK(w.keys_t != nullptr, "attention_rows needs the cache's fp32 copy (a CPU cache)");
    const int64_t t = q.size(0), h = q.size(1), d = q.size(2);
    const int64_t hkv = kv.layer_keys(layer).size(0);
    const int64_t group = h / hkv;
    const int64_t n_rows = static_cast<int64_t>(rows.size());
    const int64_t slots_total = kv_len + t;  // cache rows + step rows
    const int64_t sp = round_up(slots_total), dp = round_up(d);
    static_assert(KvCache::kWidenedBlock == kLanes,
                  "the cache's key blocks are the kernel's vectors");
    PYLA_CHECK(w.value_stride == dp, "attention_rows: cache copy layout");
    const T* qp = q.data_ptr<T>();
    T* op = out.data_ptr<T>();
    const int64_t qs0 = q.stride(0), qs1 = q.stride(1), os0 = out.stride(0), os1 = out.stride(1);
    const int64_t kt_head = round_up(kv.capacity()) * d, vf_head = kv.capacity() * dp;

    // Small steps run on the calling thread: a parallel region costs more than it saves there,
    // and far more when another process holds a core.
    const int64_t row_work = slots_total * d * group;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(row_work, 1));

    // One task = one query row x one KV head (its `group` query heads, in tiles).
    const float fscale = static_cast<float>(scale);
    const int64_t heads = attend_heads_per_tile();
    at::parallel_for(0, n_rows * hkv, grain, [&](int64_t begin, int64_t end) {
        std::vector<float> qf(kMaxHeads * dp, 0.f), sc(kMaxHeads * sp);
        std::vector<int32_t> slots;
        for (int64_t task = begin; task < end; ++task) {
            const int64_t r = rows[task / hkv], kvh = task % hkv;
            // Slots this row sees, in order: all cache rows, then its visible step rows.
            slots.clear();
            for (int32_t s = 0; s < kv_len; ++s) slots.push_back(s);
            for (int64_t j = 0; j < t; ++j) {
                if (mask ? mask[r * t + j] != 0 : j <= r) {
                    slots.push_back(static_cast<int32_t>(kv_len + j));
                }
            }
            const int64_t n = static_cast<int64_t>(slots.size());
            for (int64_t g0 = 0; g0 < group; g0 += heads) {
                const int ng = static_cast<int>(std::min<int64_t>(heads, group - g0));
                for (int g = 0; g < ng; ++g) {
                    const T* src = qp + r * qs0 + (kvh * group + g0 + g) * qs1;
                    for (int64_t i = 0; i < d; ++i) qf[g * dp + i] = to_f32(src[i]);
                }
                attend(ng, qf.data(), w.keys_t + kvh * kt_head, w.values + kvh * vf_head, d, dp, sp,
                       slots.data(), n, fscale, sc.data(), op + r * os0 + (kvh * group + g0) * os1,
                       os1);
            }
        }
    });
}

// float64 models (exactness tests): a plain loop, no speed concern.
void run_fp64(const at::Tensor& q, const KvCache& kv, int layer, int64_t kv_len,
              const uint8_t* mask, const std::vector<int32_t>& rows, double scale,
              at::Tensor& out) {
    const at::Tensor& keys = kv.layer_keys(layer);
    const at::Tensor& values = kv.layer_values(layer);
    const int64_t t = q.size(0), h = q.size(1), d = q.size(2), hkv = keys.size(0);
    const int64_t group = h / hkv;
    auto qa = q.accessor<double, 3>();
    auto ka = keys.accessor<double, 3>();
    auto va = values.accessor<double, 3>();
    auto oa = out.accessor<double, 3>();
    for (int32_t r : rows) {
        std::vector<int64_t> slots;
        for (int64_t j = 0; j < kv_len; ++j) slots.push_back(j);
        for (int64_t j = 0; j < t; ++j) {
            if (mask ? mask[r * t + j] != 0 : j <= r) slots.push_back(kv_len + j);
        }
        for (int64_t head = 0; head < h; ++head) {
            const int64_t kvh = head / group;
            std::vector<double> sc(slots.size());
            double m = -INFINITY, denom = 0;
            for (size_t s = 0; s < slots.size(); ++s) {
                double dot = 0;
                for (int64_t i = 0; i < d; ++i) dot += qa[r][head][i] * ka[kvh][slots[s]][i];
                sc[s] = dot * scale;
                m = std::max(m, sc[s]);
            }
            for (double& x : sc) {
                x = std::exp(x - m);
                denom += x;
            }
            for (int64_t i = 0; i < d; ++i) {
                double a = 0;
                for (size_t s = 0; s < slots.size(); ++s) a += sc[s] * va[kvh][slots[s]][i];
                oa[r][head][i] = a / denom;
            }
        }
    }
}

}  // namespace

void attention_rows(const at::Tensor& q, const KvCache& kv, int layer, int64_t kv_len,
                    const uint8_t* mask, const std::vector<int32_t>& rows, double scale,
                    at::Tensor& out) {
    RECORD_FUNCTION("pylookahead::attention_rows", std::vector<c10::IValue>());
    const at::Tensor& keys = kv.layer_keys(layer);
    PYLA_CHECK(q.dim() == 3 && out.sizes() == q.sizes() && q.size(2) == keys.size(2) &&
                   kv_len + q.size(0) <= kv.capacity(),
               "attention shapes");
    PYLA_CHECK(q.stride(2) == 1 && out.stride(2) == 1,
               "attention_rows needs a contiguous last dimension");
    PYLA_CHECK(q.device().is_cpu() && keys.is_cpu(), "attention_rows runs on the CPU");
    switch (q.scalar_type()) {
        case at::kFloat: run_fp32<float>(q, kv, layer, kv_len, mask, rows, scale, out); break;
        case at::kBFloat16:
            run_fp32<at::BFloat16>(q, kv, layer, kv_len, mask, rows, scale, out);
            break;
        case at::kHalf: run_fp32<at::Half>(q, kv, layer, kv_len, mask, rows, scale, out); break;
        case at::kDouble: run_fp64(q, kv, layer, kv_len, mask, rows, scale, out); break;
        default: PYLA_CHECK(false, "unsupported attention dtype " << q.scalar_type());
    }
}

}  // namespace pylookahead
