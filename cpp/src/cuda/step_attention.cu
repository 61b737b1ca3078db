#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda/dtype_io.cuh"
#include "cuda/step_attention.h"

namespace pylookahead {

namespace {

constexpr int kChunk = 128;    // logical keys per chunk; also the block size
constexpr int kThreads = 128;  // 4 warps
constexpr int64_t kMaxShared = 48 * 1024;

using cuda_io::load;
using cuda_io::store;

// Grid (rows, kv_heads), kThreads threads. Shared memory: q [G * D], weights [G * kChunk],
// acc [G * D], per head (max, sum, rescale) [G * 3] as floats, then the chunk's cache rows
// [kChunk] as ints. G = heads / kv_heads query heads share the block's kv head.
//
// Every floating-point operation below is fixed by the logical key index alone:
//  - score(j) = scale * (sum over d in order of q[d] * k[d], fmaf), one thread per key;
//  - per chunk and head, lane i of one warp sums the weights of keys i, i+32, i+64, i+96 in that
//    order, then the lanes fold by xor-shuffle (16, 8, 4, 2, 1) and lane 0 keeps the result;
//  - acc[g][d] = acc * rescale + sum over the chunk's keys in order of w * v[d] (fmaf).
// Maxima are exact in any order.
template <typename T>
__global__ void step_attention_kernel(StepAttentionArgs a) {
    const int r = blockIdx.x, kvh = blockIdx.y, t = threadIdx.x;
    const int D = a.head_dim, G = a.heads / a.kv_heads;
    extern __shared__ float smem[];
    float* qs = smem;
    float* w = qs + G * D;
    float* acc = w + G * kChunk;
    float* stat = acc + G * D;
    int* slot = reinterpret_cast<int*>(stat + 3 * G);

    const T* q = static_cast<const T*>(a.q) + (static_cast<int64_t>(r) * a.heads + kvh * G) * D;
    const T* keys = static_cast<const T*>(a.keys) + kvh * a.kv_head_stride;
    const T* values = static_cast<const T*>(a.values) + kvh * a.kv_head_stride;
    const int kv_len = *a.kv_len;
    const int nvis = a.nvisible[r];
    const int n = kv_len + nvis;  // logical keys this row sees
    const int32_t* vis = a.visible + static_cast<int64_t>(r) * a.rows;

    for (int i = t; i < G * D; i += kThreads) {
        qs[i] = load(q + i);
        acc[i] = 0.0f;
    }
    if (t < G) {
        stat[3 * t] = -INFINITY;
        stat[3 * t + 1] = 0.0f;
        stat[3 * t + 2] = 0.0f;
    }
    __syncthreads();

    const int warp = t / 32, lane = t % 32;
    for (int base = 0; base < n; base += kChunk) {
        const int count = min(kChunk, n - base);
        if (t < count) {
            const int j = base + t;
            const int s = j < kv_len ? j : kv_len + vis[j - kv_len];
            slot[t] = s;
            const T* k = keys + static_cast<int64_t>(s) * D;
            for (int g = 0; g < G; ++g) {
                const float* qg = qs + g * D;
                float dot = 0.0f;
                for (int d = 0; d < D; ++d) dot = fmaf(qg[d], load(k + d), dot);
                w[g * kChunk + t] = dot * a.scale;
            }
        }
        __syncthreads();
        for (int g = warp; g < G; g += kThreads / 32) {
            float* wg = w + g * kChunk;
            float mx = -INFINITY;
            for (int i = lane; i < count; i += 32) mx = fmaxf(mx, wg[i]);
            for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float m_old = stat[3 * g];
            const float m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            for (int i = lane; i < count; i += 32) {
                const float p = expf(wg[i] - m_new);
                wg[i] = p;
                sum += p;
            }
            for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            if (lane == 0) {
                const float rescale = expf(m_old - m_new);  // 0 on the first chunk
                stat[3 * g] = m_new;
                stat[3 * g + 1] = stat[3 * g + 1] * rescale + sum;
                stat[3 * g + 2] = rescale;
            }
        }
        __syncthreads();
        for (int e = t; e < G * D; e += kThreads) {
            const int g = e / D, d = e % D;
            const float* wg = w + g * kChunk;
            float x = acc[e] * stat[3 * g + 2];
            for (int i = 0; i < count; ++i) {
                x = fmaf(wg[i], load(values + static_cast<int64_t>(slot[i]) * D + d), x);
            }
            acc[e] = x;
        }
        __syncthreads();
    }
    T* out = static_cast<T*>(a.out) + (static_cast<int64_t>(r) * a.heads + kvh * G) * D;
    for (int e = t; e < G * D; e += kThreads) store(out + e, acc[e] / stat[3 * (e / D) + 1]);
}

}  // namespace

int64_t step_attention_shared_bytes(int heads, int kv_heads, int head_dim) {
    const int64_t g = kv_heads > 0 ? heads / kv_heads : 0;
    return (g * head_dim * 2 + g * kChunk + 3 * g) * static_cast<int64_t>(sizeof(float)) +
           kChunk * static_cast<int64_t>(sizeof(int));
}

void launch_step_attention(const StepAttentionArgs& a, void* stream) {
    if (a.rows < 1 || a.kv_heads < 1 || a.heads % a.kv_heads != 0 || a.head_dim < 1 ||
        a.head_dim > 1024) {
        throw std::invalid_argument("step attention: bad shape (rows " + std::to_string(a.rows) +
                                    ", heads " + std::to_string(a.heads) + ", kv_heads " +
                                    std::to_string(a.kv_heads) + ", head_dim " +
                                    std::to_string(a.head_dim) + ")");
    }
    const int64_t shared = step_attention_shared_bytes(a.heads, a.kv_heads, a.head_dim);
    if (shared > kMaxShared) {
        throw std::invalid_argument("step attention: heads / kv_heads * head_dim too large (" +
                                    std::to_string(shared) + " bytes of shared memory)");
    }
    const dim3 grid(a.rows, a.kv_heads);
    auto s = static_cast<cudaStream_t>(stream);
    switch (a.dtype) {
        case StepAttentionDType::kFloat32:
            step_attention_kernel<float><<<grid, kThreads, shared, s>>>(a);
            break;
        case StepAttentionDType::kBFloat16:
            step_attention_kernel<__nv_bfloat16><<<grid, kThreads, shared, s>>>(a);
            break;
        case StepAttentionDType::kFloat16:
            step_attention_kernel<__half><<<grid, kThreads, shared, s>>>(a);
            break;
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        throw std::runtime_error(std::string("step attention launch failed: ") +
                                 cudaGetErrorString(err));
    }
}

}  // namespace pylookahead
