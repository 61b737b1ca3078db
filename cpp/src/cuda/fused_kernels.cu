#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "cuda/dtype_io.cuh"
#include "cuda/fused_kernels.h"

namespace pylookahead {

namespace {

using cuda_io::load;
using cuda_io::round_to;
using cuda_io::store;
// Arithmetic below uses __fmul_rn / __fadd_rn where an expression has a product and a sum, so
// nothing is contracted into an FMA.

constexpr int kNormThreads = 256;

// One block per row. Sum of squares: thread t adds elements t, t + 256, ... in order; the 256
// partial sums fold by a fixed tree (xor-shuffles within warps, then warp 0 over the 8 warp sums).
template <typename T>
__global__ void rms_norm_kernel(T* x, const T* delta, const T* w, T* y, int64_t hidden,
                                float eps) {
    const int64_t r = blockIdx.x;
    T* xr = x + r * hidden;
    const T* dr = delta ? delta + r * hidden : nullptr;
    T* yr = y + r * hidden;
    __shared__ float warp_sums[kNormThreads / 32];
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < hidden; i += kNormThreads) {
        float v = load(xr + i);
        if (dr) {
            v = round_to<T>(__fadd_rn(v, load(dr + i)));
            store(xr + i, v);
        }
        ss = __fadd_rn(ss, __fmul_rn(v, v));
    }
    for (int off = 16; off > 0; off >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, off));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = ss;
    __syncthreads();
    __shared__ float scale;
    if (warp == 0) {
        float s = lane < kNormThreads / 32 ? warp_sums[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
        if (lane == 0) scale = rsqrtf(__fadd_rn(s / static_cast<float>(hidden), eps));
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < hidden; i += kNormThreads) {
        const float n = round_to<T>(__fmul_rn(load(xr + i), scale));
        store(yr + i, __fmul_rn(load(w + i), n));
    }
}

template <typename T>
__global__ void rope_kernel(const T* x, int64_t x_row, int64_t x_head, const T* cos, const T* sin,
                            T* y, int64_t heads, int64_t head_dim) {
    const int64_t r = blockIdx.x, h = blockIdx.y, half = head_dim / 2;
    const T* xh = x + r * x_row + h * x_head;
    T* yh = y + (r * heads + h) * head_dim;
    for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
        const float rot = d < half ? -load(xh + d + half) : load(xh + d - half);
        const float a = round_to<T>(__fmul_rn(load(xh + d), load(cos + r * head_dim + d)));
        const float b = round_to<T>(__fmul_rn(rot, load(sin + r * head_dim + d)));
        store(yh + d, __fadd_rn(a, b));
    }
}

template <typename T>
__global__ void silu_mul_kernel(const T* gu, T* y, int64_t rows, int64_t inter) {
    const int64_t n = rows * inter;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / inter, c = i % inter;
        const float g = load(gu + r * 2 * inter + c);
        const float s = round_to<T>(g / (1.0f + expf(-g)));
        store(y + i, __fmul_rn(s, load(gu + r * 2 * inter + inter + c)));
    }
}

void check_launch(const char* what) {
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        throw std::runtime_error(std::string(what) + " launch failed: " + cudaGetErrorString(err));
    }
}

template <template <typename> class Launch, typename... Args>
void by_dtype(int dtype, Args... args) {
    switch (dtype) {
        case 0: Launch<float>::run(args...); break;
        case 1: Launch<__nv_bfloat16>::run(args...); break;
        case 2: Launch<__half>::run(args...); break;
        default: throw std::invalid_argument("fused kernels: dtype " + std::to_string(dtype));
    }
}

template <typename T>
struct NormLaunch {
    static void run(void* x, const void* delta, const void* w, void* y, int64_t rows,
                    int64_t hidden, float eps, cudaStream_t s) {
        rms_norm_kernel<T><<<static_cast<unsigned>(rows), kNormThreads, 0, s>>>(
            static_cast<T*>(x), static_cast<const T*>(delta), static_cast<const T*>(w),
            static_cast<T*>(y), hidden, eps);
    }
};

template <typename T>
struct RopeLaunch {
    static void run(const void* x, int64_t x_row, int64_t x_head, const void* cos,
                    const void* sin, void* y, int64_t rows, int64_t heads, int64_t head_dim,
                    cudaStream_t s) {
        const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(heads));
        const int threads = head_dim < 128 ? static_cast<int>(head_dim) : 128;
        rope_kernel<T><<<grid, threads, 0, s>>>(static_cast<const T*>(x), x_row, x_head,
                                                static_cast<const T*>(cos),
                                                static_cast<const T*>(sin), static_cast<T*>(y),
                                                heads, head_dim);
    }
};

template <typename T>
struct SiluMulLaunch {
    static void run(const void* gu, void* y, int64_t rows, int64_t inter, cudaStream_t s) {
        const int64_t n = rows * inter;
        const unsigned blocks = static_cast<unsigned>(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
        silu_mul_kernel<T><<<blocks, 256, 0, s>>>(static_cast<const T*>(gu), static_cast<T*>(y),
                                                  rows, inter);
    }
};

}  // namespace

void launch_rms_norm(void* x, const void* delta, const void* w, void* y, int64_t rows,
                     int64_t hidden, float eps, int dtype, void* stream) {
    if (rows == 0) return;
    by_dtype<NormLaunch>(dtype, x, delta, w, y, rows, hidden, eps,
                         static_cast<cudaStream_t>(stream));
    check_launch("rms_norm");
}

void launch_rope(const void* x, int64_t x_row, int64_t x_head, const void* cos, const void* sin,
                 void* y, int64_t rows, int64_t heads, int64_t head_dim, int dtype, void* stream) {
    if (rows == 0) return;
    by_dtype<RopeLaunch>(dtype, x, x_row, x_head, cos, sin, y, rows, heads, head_dim,
                         static_cast<cudaStream_t>(stream));
    check_launch("rope");
}

void launch_silu_mul(const void* gu, void* y, int64_t rows, int64_t inter, int dtype,
                     void* stream) {
    if (rows == 0) return;
    by_dtype<SiluMulLaunch>(dtype, gu, y, rows, inter, static_cast<cudaStream_t>(stream));
    check_launch("silu_mul");
}

}  // namespace pylookahead
