#include "model/fma_linear_op.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include "check.h"
#include "kernels/fma_linear.h"

namespace pylookahead {

namespace {

WeightFormat format_of(at::ScalarType t) {
    switch (t) {
        case at::kFloat: return WeightFormat::kF32;
        case at::kHalf: return WeightFormat::kF16;
        case at::kBFloat16: return WeightFormat::kBF16;
        default: PYLA_CHECK(false, "fma_linear: no weight format for " << t);
    }
    return WeightFormat::kF32;
}

}  // namespace

at::Tensor fma_linear_pack(const at::Tensor& weight, CpuIsa path) {
    PYLA_CHECK(weight.dim() == 2, "fma_linear_pack needs a [N, K] weight");
    // format_of checks the dtype; a format the path cannot read is packed as fp32.
    const at::Tensor w =
        fma_linear_reads(path, format_of(weight.scalar_type())) ? weight : weight.to(at::kFloat);
    const int64_t n = w.size(0), k = w.size(1);
    const int64_t blocks = (n + kFmaLinearBlock - 1) / kFmaLinearBlock;
    at::Tensor padded = at::zeros({blocks * kFmaLinearBlock, k}, w.options());
    padded.narrow(0, 0, n).copy_(w);
    // [blocks, 8, K] -> [blocks, K, 8]
    return padded.view({blocks, kFmaLinearBlock, k}).permute({0, 2, 1}).contiguous();
}

at::Tensor fma_linear(const at::Tensor& x, const at::Tensor& packed, int64_t n,
                      const at::Tensor& bias, CpuIsa path, at::ScalarType out_dtype) {
    RECORD_FUNCTION("pylookahead::fma_linear", std::vector<c10::IValue>());
    PYLA_CHECK(x.dim() == 2 && packed.dim() == 3 && packed.size(2) == kFmaLinearBlock &&
                   x.size(1) == packed.size(1) && packed.size(0) * kFmaLinearBlock >= n,
               "fma_linear shapes");
    PYLA_CHECK(!bias.defined() || (bias.scalar_type() == at::kFloat && bias.is_contiguous() &&
                                   bias.numel() == n),
               "fma_linear needs an fp32 bias of N values");
    const int64_t rows = x.size(0), k = x.size(1), blocks = packed.size(0);
    const at::Tensor xf = x.to(at::kFloat).contiguous();
    at::Tensor y = at::empty({rows, n}, xf.options());
    if (rows > 0) {
        const WeightFormat format = format_of(packed.scalar_type());
        const float* xp = xf.data_ptr<float>();
        const void* wp = packed.data_ptr();
        const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
        float* yp = y.data_ptr<float>();
        // Column blocks split among threads (each column is computed by one thread, so the split
        // changes no bits); about 16 blocks (128 columns) per task at least.
        at::parallel_for(0, blocks, 16, [&](int64_t b0, int64_t b1) {
            fma_linear_blocks(path, format, xp, rows, k, k, wp, b0, b1, bp, yp, n, n);
        });
    }
    return out_dtype == at::kFloat ? y : y.to(out_dtype);
}

}  // namespace pylookahead
