// Which vector instructions the engine's own kernels may use: detected once per process from
// the CPU, optionally capped by the environment. std-only.
//
//   PYLOOKAHEAD_CPU_ISA=avx512bf16|avx512|avx2|generic   caps the level (never raises it)
//
// The cap lets a machine with AVX-512 prove the AVX2 and generic paths (CI runs the exactness
// tests under PYLOOKAHEAD_CPU_ISA=avx2 beside ONEDNN_MAX_CPU_ISA=AVX2 and ATEN_CPU_CAPABILITY=avx2).
// Levels are ordered: each one includes the ones below it.
#pragma once

#include <string>

namespace pylookahead {

enum class CpuIsa {
    kGeneric =
        0,  // no SIMD assumption beyond the compiler's baseline (SSE2 on x86-64, NEON on aarch64)
    kAvx2 = 1,        // x86-64-v3: AVX2, FMA, F16C (BMI1/2, ...)
    kAvx512 = 2,      // x86-64-v4: AVX512F, BW, CD, DQ, VL
    kAvx512Bf16 = 3,  // x86-64-v4 + AVX512-BF16
};

// The level the kernels use: min(detected, cap). Thread-safe (computed on first call).
// Throws ConfigError naming the variable when PYLOOKAHEAD_CPU_ISA holds an unknown value.
CpuIsa cpu_isa();
// What this CPU supports, ignoring the cap.
CpuIsa detected_cpu_isa();
// True when cpu_isa() < detected_cpu_isa() (an environment cap is in force).
bool cpu_isa_capped();

// "generic", "avx2", "avx512", "avx512bf16".
const char* cpu_isa_name(CpuIsa isa);
// The CPU features a level needs that this CPU lacks, e.g. "avx512_bf16" or "avx2, fma", or
// "capped by PYLOOKAHEAD_CPU_ISA=avx2" when the CPU has them but the cap forbids them; "" when
// cpu_isa() >= isa. For error messages and ModelInfo.
std::string cpu_isa_shortfall(CpuIsa isa);

}  // namespace pylookahead
