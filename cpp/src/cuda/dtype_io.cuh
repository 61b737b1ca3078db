// Element access for the CUDA kernels: loads widen float32 / bfloat16 / float16 to float, stores
// round to nearest even, round_to<T> gives a float as T holds it. Device code only (nvcc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace pylookahead {
namespace cuda_io {

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }

template <typename T>
__device__ __forceinline__ float round_to(float v) {
    T t;
    store(&t, v);
    return load(&t);
}

}  // namespace cuda_io
}  // namespace pylookahead
