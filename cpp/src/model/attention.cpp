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

constexpr int kLanes = 16;   // partial sums of a dot product
constexpr int kBlock = 64;   // key slots converted to fp32 at a time

// out[g * n + s] = scale * dot(q[g], k[s]) for g < group, s < n.   q [group, d], k [n, d]
PYLA_ISA_CLONES
void block_scores(const float* q, const float* k, int64_t group, int64_t n, int64_t d,
                  float scale, float* out, int64_t out_stride) {
    for (int64_t g = 0; g < group; ++g) {
        const float* qg = q + g * d;
        for (int64_t s = 0; s < n; ++s) {
            const float* ks = k + s * d;
            float part[kLanes] = {};
            int64_t i = 0;
            for (; i + kLanes <= d; i += kLanes) {
                for (int l = 0; l < kLanes; ++l) part[l] += qg[i + l] * ks[i + l];
            }
            for (; i < d; ++i) part[i % kLanes] += qg[i] * ks[i];
            float sum = 0.f;
            for (int l = 0; l < kLanes; ++l) sum += part[l];
            out[g * out_stride + s] = sum * scale;
        }
    }
}

// acc[g, :] += sum over s (in order) of w[g * w_stride + s] * v[s, :].   v [n, d], acc [group, d]
PYLA_ISA_CLONES
void block_weighted_sum(const float* w, int64_t w_stride, const float* v, int64_t group,
                        int64_t n, int64_t d, float* acc) {
    for (int64_t g = 0; g < group; ++g) {
        float* ag = acc + g * d;
        for (int64_t s = 0; s < n; ++s) {
            const float ws = w[g * w_stride + s];
            const float* vs = v + s * d;
            for (int64_t i = 0; i < d; ++i) ag[i] += ws * vs[i];
        }
    }
}

template <typename T>
void run_fp32(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
              int64_t kv_len, const uint8_t* mask, const std::vector<int32_t>& rows, double scale,
              at::Tensor& out) {
    const int64_t t = q.size(0), h = q.size(1), d = q.size(2), hkv = keys.size(0);
    const int64_t group = h / hkv;
    const int64_t n_rows = static_cast<int64_t>(rows.size());
    const T* qp = q.data_ptr<T>();
    const T* kp = keys.data_ptr<T>();
    const T* vp = values.data_ptr<T>();
    T* op = out.data_ptr<T>();
    const int64_t qs0 = q.stride(0), qs1 = q.stride(1), os0 = out.stride(0), os1 = out.stride(1);
    const int64_t ks0 = keys.stride(0), ks1 = keys.stride(1);
    const int64_t vs0 = values.stride(0), vs1 = values.stride(1);

    // One task = one query row x one KV head (its `group` query heads share every K/V load).
    // Small steps run on the calling thread: a parallel region costs more than it saves there,
    // and far more when another process holds a core.
    const int64_t task_work = (kv_len + t) * d * group;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(task_work, 1));
    at::parallel_for(0, n_rows * hkv, grain, [&](int64_t begin, int64_t end) {
        std::vector<float> qf(group * d), buf(kBlock * d), acc(group * d), scores;
        std::vector<int64_t> slots;
        for (int64_t task = begin; task < end; ++task) {
            const int64_t r = rows[task / hkv], kvh = task % hkv;
            // The slots this row sees, in slot order: the cache, then its visible step rows.
            slots.clear();
            for (int64_t j = 0; j < kv_len; ++j) slots.push_back(j);
            for (int64_t j = 0; j < t; ++j) {
                if (mask ? mask[r * t + j] != 0 : j <= r) slots.push_back(kv_len + j);
            }
            const int64_t n = static_cast<int64_t>(slots.size());
            for (int64_t g = 0; g < group; ++g) {
                const T* src = qp + r * qs0 + (kvh * group + g) * qs1;
                for (int64_t i = 0; i < d; ++i) qf[g * d + i] = static_cast<float>(src[i]);
            }
            scores.assign(group * n, 0.f);
            for (int64_t s0 = 0; s0 < n; s0 += kBlock) {
                const int64_t nb = std::min<int64_t>(kBlock, n - s0);
                for (int64_t s = 0; s < nb; ++s) {
                    const T* src = kp + kvh * ks0 + slots[s0 + s] * ks1;
                    for (int64_t i = 0; i < d; ++i) buf[s * d + i] = static_cast<float>(src[i]);
                }
                block_scores(qf.data(), buf.data(), group, nb, d, static_cast<float>(scale),
                             scores.data() + s0, n);
            }
            std::vector<float> denom(group, 0.f);
            for (int64_t g = 0; g < group; ++g) {
                float* sg = scores.data() + g * n;
                const float m = *std::max_element(sg, sg + n);
                for (int64_t s = 0; s < n; ++s) {
                    sg[s] = std::exp(sg[s] - m);
                    denom[g] += sg[s];
                }
            }
            std::fill(acc.begin(), acc.end(), 0.f);
            for (int64_t s0 = 0; s0 < n; s0 += kBlock) {
                const int64_t nb = std::min<int64_t>(kBlock, n - s0);
                for (int64_t s = 0; s < nb; ++s) {
                    const T* src = vp + kvh * vs0 + slots[s0 + s] * vs1;
                    for (int64_t i = 0; i < d; ++i) buf[s * d + i] = static_cast<float>(src[i]);
                }
                block_weighted_sum(scores.data() + s0, n, buf.data(), group, nb, d, acc.data());
            }
            for (int64_t g = 0; g < group; ++g) {
                T* dst = op + r * os0 + (kvh * group + g) * os1;
                for (int64_t i = 0; i < d; ++i) dst[i] = static_cast<T>(acc[g * d + i] / denom[g]);
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
