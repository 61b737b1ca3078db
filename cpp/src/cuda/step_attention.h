// Row-invariant attention of a decode step on a CUDA device: the GPU twin of model/attention.h.
//
// Each (row, kv head) block walks the keys the row may see in *logical* order -- the committed
// rows 0 .. kv_len-1, then its visible step rows in ascending order -- in fixed chunks of 128
// logical keys, with a fixed reduction tree per chunk and an online softmax across chunks. A row's
// result is therefore a function of its query and that logical key sequence alone: the same bits
// whether the row's tokens were committed (a greedy step) or sit in the step as a verified
// candidate (a lookahead step), and whatever else the step holds. The header needs no CUDA or
// torch headers: pointers, sizes and the stream as void*.
#pragma once

#include <cstdint>

namespace pylookahead {

enum class StepAttentionDType { kFloat32, kBFloat16, kFloat16 };

struct StepAttentionArgs {
    const void* q = nullptr;       // [rows, heads, head_dim] contiguous, `dtype`
    const void* keys = nullptr;    // one layer's cache [kv_heads, capacity, head_dim], `dtype`
    const void* values = nullptr;  // likewise
    int64_t kv_head_stride = 0;    // elements between kv heads of keys/values (capacity * head_dim)
    void* out = nullptr;           // [rows, heads, head_dim] contiguous, `dtype`
    const int32_t* kv_len =
        nullptr;  // device scalar: committed rows; step row j is cache row kv_len + j
    const int32_t* visible = nullptr;   // device [rows, rows]: row r's visible step rows, ascending
    const int32_t* nvisible = nullptr;  // device [rows]: how many of visible[r] are valid (>= 1)
    int rows = 0, heads = 0, kv_heads = 0, head_dim = 0;
    float scale = 1.0f;
    StepAttentionDType dtype = StepAttentionDType::kFloat32;
};

// Bytes of shared memory a launch needs; the launch throws std::invalid_argument above 48 KiB
// (heads / kv_heads * head_dim too large) or for head_dim > 1024.
int64_t step_attention_shared_bytes(int heads, int kv_heads, int head_dim);

// Enqueues the kernel on `stream` (a cudaStream_t). Asynchronous; safe inside CUDA-graph capture
// (it reads kv_len, visible and nvisible from device memory at run time). Throws
// std::runtime_error when the launch fails.
void launch_step_attention(const StepAttentionArgs& args, void* stream);

}  // namespace pylookahead
