#include "model/attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>

#include "check.h"

namespace pylookahead {

namespace {

// Every reduction below has one fixed order, independent of how many rows, slots or threads a
// call has, so a row's result is a function of its own inputs only. The hot loops come in
// per-ISA clones (picked once per process by the loader), so on one machine every call runs the
// same instructions.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define PYLA_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PYLA_ISA_CLONES
#endif

constexpr int kLanes = 16;  // partial sums of the softmax denominator, by key index mod 16

// Scores of `n` consecutive key slots for one query vector, vectorised over the slots:
// out[s] = scale * sum_i q[i] * kt[i * stride + s], the sum taken over i = 0..d-1 in order, so each
// out[s] is computed with exactly the operations of the scalar loop in key_score().
PYLA_ISA_CLONES
void scores_contiguous(const float* q, const float* kt, int64_t stride, int64_t n, int64_t d,
                       float scale, float* out) {
    for (int64_t s = 0; s < n; ++s) out[s] = 0.f;
    for (int64_t i = 0; i < d; ++i) {
        const float qi = q[i];
        const float* row = kt + i * stride;
        for (int64_t s = 0; s < n; ++s) out[s] += qi * row[s];
    }
    for (int64_t s = 0; s < n; ++s) out[s] *= scale;
}

// The score of one key slot: the same operations, in the same order, as scores_contiguous().
float key_score(const float* q, const float* kt, int64_t stride, int64_t slot, int64_t d,
                float scale) {
    float acc = 0.f;
    for (int64_t i = 0; i < d; ++i) acc += q[i] * kt[i * stride + slot];
    return acc * scale;
}

// acc[:] += w * v[:]
PYLA_ISA_CLONES
void axpy(float w, const float* v, int64_t d, float* acc) {
    for (int64_t i = 0; i < d; ++i) acc[i] += w * v[i];
}

template <typename T>
void run_fp32(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
              int64_t kv_len, const uint8_t* mask, const std::vector<int32_t>& rows, double scale,
              at::Tensor& out) {
    const int64_t t = q.size(0), h = q.size(1), d = q.size(2), hkv = keys.size(0);
    const int64_t group = h / hkv;
    const int64_t n_rows = static_cast<int64_t>(rows.size());
    const int64_t slots_total = kv_len + t;  // cache rows + step rows
    const T* qp = q.data_ptr<T>();
    const T* kp = keys.data_ptr<T>();
    const T* vp = values.data_ptr<T>();
    T* op = out.data_ptr<T>();
    const int64_t qs0 = q.stride(0), qs1 = q.stride(1), os0 = out.stride(0), os1 = out.stride(1);
    const int64_t ks0 = keys.stride(0), ks1 = keys.stride(1);
    const int64_t vs0 = values.stride(0), vs1 = values.stride(1);

    // Small steps run on the calling thread: a parallel region costs more than it saves there,
    // and far more when another process holds a core.
    const int64_t row_work = slots_total * d * group;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 17) / std::max<int64_t>(row_work, 1));

    // Phase 1: every KV head's keys, transposed, and values as fp32, once for all rows.
    // kt [Hkv, D, S], vf [Hkv, S, D]
    std::vector<float> kt(hkv * d * slots_total), vf(hkv * slots_total * d);
    at::parallel_for(0, hkv, n_rows >= 4 ? 1 : hkv, [&](int64_t begin, int64_t end) {
        for (int64_t kvh = begin; kvh < end; ++kvh) {
            float* ktk = kt.data() + kvh * d * slots_total;
            float* vfk = vf.data() + kvh * slots_total * d;
            for (int64_t s = 0; s < slots_total; ++s) {
                const T* ks = kp + kvh * ks0 + s * ks1;
                const T* vs = vp + kvh * vs0 + s * vs1;
                for (int64_t i = 0; i < d; ++i) {
                    ktk[i * slots_total + s] = static_cast<float>(ks[i]);
                    vfk[s * d + i] = static_cast<float>(vs[i]);
                }
            }
        }
    });

    // Phase 2: one task = one query row x one KV head (its `group` query heads).
    at::parallel_for(0, n_rows * hkv, grain, [&](int64_t begin, int64_t end) {
        std::vector<float> qf(d), acc(d), sc;
        std::vector<int64_t> slots;
        for (int64_t task = begin; task < end; ++task) {
            const int64_t r = rows[task / hkv], kvh = task % hkv;
            const float* ktk = kt.data() + kvh * d * slots_total;
            const float* vfk = vf.data() + kvh * slots_total * d;
            // Keys this row sees, compacted in slot order: all cache rows, then its step rows.
            slots.clear();
            for (int64_t j = 0; j < t; ++j) {
                if (mask ? mask[r * t + j] != 0 : j <= r) slots.push_back(kv_len + j);
            }
            const int64_t n = kv_len + static_cast<int64_t>(slots.size());
            sc.resize(n);
            for (int64_t g = 0; g < group; ++g) {
                const T* src = qp + r * qs0 + (kvh * group + g) * qs1;
                for (int64_t i = 0; i < d; ++i) qf[i] = static_cast<float>(src[i]);
                const float fscale = static_cast<float>(scale);
                scores_contiguous(qf.data(), ktk, slots_total, kv_len, d, fscale, sc.data());
                for (size_t e = 0; e < slots.size(); ++e) {
                    sc[kv_len + e] = key_score(qf.data(), ktk, slots_total, slots[e], d, fscale);
                }
                const float m = *std::max_element(sc.begin(), sc.end());
                float part[kLanes] = {};
                for (int64_t s = 0; s < n; ++s) {
                    sc[s] = std::exp(sc[s] - m);
                    part[s % kLanes] += sc[s];
                }
                float denom = 0.f;
                for (int l = 0; l < kLanes; ++l) denom += part[l];
                std::fill(acc.begin(), acc.end(), 0.f);
                for (int64_t s = 0; s < kv_len; ++s) axpy(sc[s], vfk + s * d, d, acc.data());
                for (size_t e = 0; e < slots.size(); ++e) {
                    axpy(sc[kv_len + e], vfk + slots[e] * d, d, acc.data());
                }
                T* dst = op + r * os0 + (kvh * group + g) * os1;
                for (int64_t i = 0; i < d; ++i) dst[i] = static_cast<T>(acc[i] / denom);
            }
        }
    });
}

// float64 models (exactness tests): a plain loop, no speed concern.
void run_fp64(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
              int64_t kv_len, const uint8_t* mask, const std::vector<int32_t>& rows, double scale,
              at::Tensor& out) {
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

void attention_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                    int64_t kv_len, const uint8_t* mask, const std::vector<int32_t>& rows,
                    double scale, at::Tensor& out) {
    RECORD_FUNCTION("pylookahead::attention_rows", std::vector<c10::IValue>());
    PYLA_CHECK(q.dim() == 3 && keys.dim() == 3 && out.sizes() == q.sizes(), "attention shapes");
    PYLA_CHECK(q.stride(2) == 1 && keys.stride(2) == 1 && values.stride(2) == 1 &&
                   out.stride(2) == 1,
               "attention_rows needs a contiguous last dimension");
    PYLA_CHECK(q.device().is_cpu(), "attention_rows runs on the CPU");
    switch (q.scalar_type()) {
        case at::kFloat: run_fp32<float>(q, keys, values, kv_len, mask, rows, scale, out); break;
        case at::kBFloat16:
            run_fp32<at::BFloat16>(q, keys, values, kv_len, mask, rows, scale, out);
            break;
        case at::kHalf: run_fp32<at::Half>(q, keys, values, kv_len, mask, rows, scale, out); break;
        case at::kDouble: run_fp64(q, keys, values, kv_len, mask, rows, scale, out); break;
        default: PYLA_CHECK(false, "unsupported attention dtype " << q.scalar_type());
    }
}

}  // namespace pylookahead
