#include "model/fma_linear_op.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>

#include "check.h"
#include "kernels/bf16.h"
#include "kernels/fma_linear.h"
#include "kernels/quant_format.h"

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

at::ScalarType fma_linear_storage(WeightFormat format) {
    return format == WeightFormat::kQ8A8 ? at::kChar : at::kByte;
}

WeightFormat fma_linear_format(const at::Tensor& packed) {
    if (packed.scalar_type() == at::kChar) {
        PYLA_CHECK(packed.dim() == 3 && packed.size(2) == quant_group_bytes(WeightFormat::kQ8A8),
                   "fma_linear: an int8-activation weight is [blocks, K/32, 544] int8");
        return WeightFormat::kQ8A8;
    }
    if (packed.scalar_type() != at::kByte) return format_of(packed.scalar_type());
    PYLA_CHECK(packed.dim() == 3,
               "fma_linear: a quantized weight is [blocks, K/32, record] or [blocks, 4 + K, 16]");
    if (packed.size(2) == kQuantBlock) return WeightFormat::kQ8C;
    for (WeightFormat f : {WeightFormat::kQ8, WeightFormat::kQ4}) {
        if (packed.size(2) == quant_group_bytes(f)) return f;
    }
    PYLA_CHECK(false,
               "fma_linear: no quantized format has records of " << packed.size(2) << " bytes");
    return WeightFormat::kQ8;
}

int64_t fma_linear_k(const at::Tensor& packed) {
    const WeightFormat format = fma_linear_format(packed);
    if (format == WeightFormat::kQ8C) return packed.size(1) - kQ8CHeadRows;
    return is_quantized(format) ? packed.size(1) * kQuantGroup : packed.size(1);
}

at::Tensor fma_linear_quantize(const at::Tensor& weight, WeightFormat format) {
    PYLA_CHECK(weight.dim() == 2 && is_quantized(format),
               "fma_linear_quantize needs a [N, K] weight");
    const at::Tensor w = weight.to(at::kFloat).contiguous();
    const int64_t n = w.size(0), k = w.size(1);
    const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
    at::Tensor out = format == WeightFormat::kQ8C
                         ? at::empty({blocks, kQ8CHeadRows + k, kQuantBlock}, at::kByte)
                         : at::empty({blocks, k / kQuantGroup, quant_group_bytes(format)},
                                     fma_linear_storage(format));
    PYLA_CHECK(out.nbytes() == static_cast<size_t>(quant_packed_bytes(format, n, k)),
               "fma_linear_quantize: layout size");
    // A run of whole blocks is a contiguous part of the layout: threads quantize block ranges.
    const float* wp = w.data_ptr<float>();
    auto* op = static_cast<unsigned char*>(out.data_ptr());
    const int64_t block_bytes = out.stride(0);
    at::parallel_for(0, blocks, 64, [&](int64_t b0, int64_t b1) {
        const int64_t c0 = b0 * kQuantBlock, c1 = std::min(n, b1 * kQuantBlock);
        quant_pack(format, wp + c0 * k, c1 - c0, k, op + b0 * block_bytes);
    });
    return out;
}

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
    const WeightFormat format = fma_linear_format(packed);
    PYLA_CHECK(x.dim() == 2 && packed.dim() == 3 &&
                   (is_quantized(format) || packed.size(2) == kFmaLinearBlock) &&
                   x.size(1) == fma_linear_k(packed) &&
                   packed.size(0) * fma_linear_block_cols(format) >= n,
               "fma_linear shapes");
    PYLA_CHECK(!bias.defined() ||
                   (bias.scalar_type() == at::kFloat && bias.is_contiguous() && bias.numel() == n),
               "fma_linear needs an fp32 bias of N values");
    const int64_t rows = x.size(0), k = x.size(1), blocks = packed.size(0);
    // The kernel reads and writes fp32. bf16 activations are widened, and a bf16 result rounded
    // (nearest even), here with ATen's rules (kernels/bf16.h): no ATen cast operator per call.
    const bool bf16_in = x.scalar_type() == at::kBFloat16 && x.is_contiguous();
    const bool bf16_out = out_dtype == at::kBFloat16;
    at::Tensor xf;
    if (bf16_in) {
        xf = at::empty({rows, k}, x.options().dtype(at::kFloat));
        const auto* src = reinterpret_cast<const uint16_t*>(x.const_data_ptr<at::BFloat16>());
        float* dst = xf.data_ptr<float>();
        for (int64_t i = 0; i < rows * k; ++i) dst[i] = bf16_bits_to_float(src[i]);
    } else {
        xf = x.to(at::kFloat).contiguous();
    }
    at::Tensor y = at::empty({rows, n}, xf.options());
    at::Tensor out = bf16_out ? at::empty({rows, n}, xf.options().dtype(at::kBFloat16)) : y;
    if (rows > 0) {
        const float* xp = xf.data_ptr<float>();
        const void* wp = packed.data_ptr();
        const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
        float* yp = y.data_ptr<float>();
        auto* op =
            bf16_out ? reinterpret_cast<uint16_t*>(out.mutable_data_ptr<at::BFloat16>()) : nullptr;
        // Column blocks split among threads (each column is computed by one thread, so the split
        // changes no bits); about 128 columns per task at least. A task rounds its own columns.
        const int64_t cols = fma_linear_block_cols(format);
        at::parallel_for(0, blocks, 128 / cols, [&](int64_t b0, int64_t b1) {
            fma_linear_blocks(path, format, xp, rows, k, k, wp, b0, b1, bp, yp, n, n);
            if (op == nullptr) return;
            const int64_t c0 = b0 * cols, c1 = std::min(n, b1 * cols);
            for (int64_t r = 0; r < rows; ++r) {
                for (int64_t c = c0; c < c1; ++c) op[r * n + c] = float_to_bf16_bits(yp[r * n + c]);
            }
        });
    }
    if (bf16_out || out_dtype == at::kFloat) return out;
    return y.to(out_dtype);
}

}  // namespace pylookahead
