#include "model/attention.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "check.h"

namespace pylookahead {

namespace {

constexpr int kLanes = 8;  // fixed partial sums of a dot product: the same order every call

template <typename Acc>
inline Acc dot(const Acc* a, const Acc* b, int64_t d) {
    Acc part[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= d; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) part[l] += a[i + l] * b[i + l];
    }
    for (; i < d; ++i) part[0] += a[i] * b[i];
    Acc s = 0;
    for (int l = 0; l < kLanes; ++l) s += part[l];
    return s;
}

template <typename T, typename Acc>
void run(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, int64_t kv_len,
         const uint8_t* mask, const std::vector<int32_t>& rows, double scale, at::Tensor& out) {
    const int64_t t = q.size(0), h = q.size(1), d = q.size(2), hkv = keys.size(0);
    const int64_t group = h / hkv;
    const int64_t n_rows = static_cast<int64_t>(rows.size());
    // Raw strided access: q/out [T, H, D] and keys/values [Hkv, C, D], last dim contiguous.
    const T* qp = q.data_ptr<T>();
    const T* kp = keys.data_ptr<T>();
    const T* vp = values.data_ptr<T>();
    T* op = out.data_ptr<T>();
    const int64_t qs0 = q.stride(0), qs1 = q.stride(1);
    const int64_t os0 = out.stride(0), os1 = out.stride(1);
    const int64_t ks0 = keys.stride(0), ks1 = keys.stride(1);
    const int64_t vs0 = values.stride(0), vs1 = values.stride(1);

    at::parallel_for(0, n_rows * h, 1, [&](int64_t begin, int64_t end) {
        std::vector<Acc> qf(d), kf(d), acc(d);
        std::vector<int64_t> slots;
        std::vector<Acc> scores;
        for (int64_t task = begin; task < end; ++task) {
            const int64_t r = rows[task / h], head = task % h, kvh = head / group;
            // The key slots this row sees, in slot order: the cache, then visible step rows.
            slots.clear();
            for (int64_t j = 0; j < kv_len; ++j) slots.push_back(j);
            for (int64_t j = 0; j < t; ++j) {
                bool visible = mask ? mask[r * t + j] != 0 : j <= r;
                if (visible) slots.push_back(kv_len + j);
            }
            const T* qrow = qp + r * qs0 + head * qs1;
            for (int64_t i = 0; i < d; ++i) qf[i] = static_cast<Acc>(qrow[i]);
            scores.resize(slots.size());
            Acc max_score = -INFINITY;
            for (size_t s = 0; s < slots.size(); ++s) {
                const T* krow = kp + kvh * ks0 + slots[s] * ks1;
                for (int64_t i = 0; i < d; ++i) kf[i] = static_cast<Acc>(krow[i]);
                scores[s] = dot(qf.data(), kf.data(), d) * static_cast<Acc>(scale);
                max_score = std::max(max_score, scores[s]);
            }
            Acc denom = 0;
            for (size_t s = 0; s < slots.size(); ++s) {
                scores[s] = std::exp(scores[s] - max_score);
                denom += scores[s];
            }
            std::fill(acc.begin(), acc.end(), Acc(0));
            for (size_t s = 0; s < slots.size(); ++s) {
                const T* vrow = vp + kvh * vs0 + slots[s] * vs1;
                const Acc w = scores[s];
                for (int64_t i = 0; i < d; ++i) acc[i] += w * static_cast<Acc>(vrow[i]);
            }
            T* orow = op + r * os0 + head * os1;
            for (int64_t i = 0; i < d; ++i) orow[i] = static_cast<T>(acc[i] / denom);
        }
    });
}

}  // namespace

void attention_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                    int64_t kv_len, const uint8_t* mask, const std::vector<int32_t>& rows,
                    double scale, at::Tensor& out) {
    PYLA_CHECK(q.dim() == 3 && keys.dim() == 3 && out.sizes() == q.sizes(), "attention shapes");
    PYLA_CHECK(q.stride(2) == 1 && keys.stride(2) == 1 && values.stride(2) == 1 &&
                   out.stride(2) == 1,
               "attention_rows needs a contiguous last dimension");
    PYLA_CHECK(q.device().is_cpu(), "attention_rows runs on the CPU");
    switch (q.scalar_type()) {
        case at::kFloat: run<float, float>(q, keys, values, kv_len, mask, rows, scale, out); break;
        case at::kDouble: run<double, double>(q, keys, values, kv_len, mask, rows, scale, out); break;
        case at::kBFloat16:
            run<at::BFloat16, float>(q, keys, values, kv_len, mask, rows, scale, out);
            break;
        case at::kHalf: run<at::Half, float>(q, keys, values, kv_len, mask, rows, scale, out); break;
        default: PYLA_CHECK(false, "unsupported attention dtype " << q.scalar_type());
    }
}

}  // namespace pylookahead
