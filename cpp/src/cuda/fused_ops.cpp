#include "cuda/fused_ops.h"

#include <c10/cuda/CUDAStream.h>

#include "check.h"
#include "cuda/fused_kernels.h"

namespace pylookahead {

namespace {

int dtype_code(const at::Tensor& t) {
    switch (t.scalar_type()) {
        case at::kFloat: return 0;
        case at::kBFloat16: return 1;
        case at::kHalf: return 2;
        default: PYLA_CHECK(false, "fused CUDA op on dtype " << t.scalar_type());
    }
    return -1;
}

void* stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

}  // namespace

at::Tensor cuda_rms_norm(const at::Tensor& x, const at::Tensor& weight, float eps) {
    PYLA_CHECK(x.dim() == 2 && x.is_contiguous() && weight.is_contiguous() &&
                   weight.scalar_type() == x.scalar_type(),
               "cuda_rms_norm of " << x.sizes());
    at::Tensor y = at::empty_like(x);
    launch_rms_norm(x.data_ptr(), nullptr, weight.data_ptr(), y.data_ptr(), x.size(0), x.size(1),
                    eps, dtype_code(x), stream());
    return y;
}

at::Tensor cuda_add_rms_norm(at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                             float eps) {
    PYLA_CHECK(x.dim() == 2 && x.is_contiguous() && delta.is_contiguous() &&
                   delta.sizes() == x.sizes() && delta.scalar_type() == x.scalar_type() &&
                   weight.is_contiguous() && weight.scalar_type() == x.scalar_type(),
               "cuda_add_rms_norm of " << x.sizes() << " and " << delta.sizes());
    at::Tensor y = at::empty_like(x);
    launch_rms_norm(x.data_ptr(), delta.data_ptr(), weight.data_ptr(), y.data_ptr(), x.size(0),
                    x.size(1), eps, dtype_code(x), stream());
    return y;
}

at::Tensor cuda_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    PYLA_CHECK(x.dim() == 3 && x.stride(2) == 1 && cos.is_contiguous() && sin.is_contiguous() &&
                   cos.scalar_type() == x.scalar_type() && sin.scalar_type() == x.scalar_type() &&
                   cos.numel() == x.size(0) * x.size(2),
               "cuda_rope of " << x.sizes() << " with tables " << cos.sizes());
    at::Tensor y = at::empty(x.sizes(), x.options());
    launch_rope(x.data_ptr(), x.stride(0), x.stride(1), cos.data_ptr(), sin.data_ptr(),
                y.data_ptr(), x.size(0), x.size(1), x.size(2), dtype_code(x), stream());
    return y;
}

at::Tensor cuda_silu_mul(const at::Tensor& gu, int64_t inter) {
    PYLA_CHECK(gu.dim() == 2 && gu.is_contiguous() && gu.size(1) == 2 * inter,
               "cuda_silu_mul of " << gu.sizes());
    at::Tensor y = at::empty({gu.size(0), inter}, gu.options());
    launch_silu_mul(gu.data_ptr(), y.data_ptr(), gu.size(0), inter, dtype_code(gu), stream());
    return y;
}

}  // namespace pylookahead
