#include "kernels/cpu_isa.h"

#include <cstdlib>
#include <utility>
#include <vector>

#include "pylookahead/errors.h"

namespace pylookahead {

namespace {

constexpr const char* kEnvVar = "PYLOOKAHEAD_CPU_ISA";

// (feature name as /proc/cpuinfo spells it, present) per level, checked cumulatively.
struct Feature {
    const char* name;
    bool present;
};

std::vector<Feature> features_of(CpuIsa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    switch (isa) {
        case CpuIsa::kGeneric: return {};
        case CpuIsa::kAvx2:
            return {{"avx2", __builtin_cpu_supports("avx2") != 0},
                    {"fma", __builtin_cpu_supports("fma") != 0},
                    {"f16c", __builtin_cpu_supports("f16c") != 0},
                    {"bmi2", __builtin_cpu_supports("bmi2") != 0}};
        case CpuIsa::kAvx512:
            return {{"avx512f", __builtin_cpu_supports("avx512f") != 0},
                    {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
                    {"avx512cd", __builtin_cpu_supports("avx512cd") != 0},
                    {"avx512dq", __builtin_cpu_supports("avx512dq") != 0},
                    {"avx512vl", __builtin_cpu_supports("avx512vl") != 0}};
        case CpuIsa::kAvx512Bf16:
            return {{"avx512_bf16", __builtin_cpu_supports("avx512bf16") != 0}};
    }
    return {};
#else
    // Not x86-64: every x86 level is absent.
    switch (isa) {
        case CpuIsa::kGeneric: return {};
        case CpuIsa::kAvx2: return {{"avx2 (x86-64 only)", false}};
        case CpuIsa::kAvx512: return {{"avx512f (x86-64 only)", false}};
        case CpuIsa::kAvx512Bf16: return {{"avx512_bf16 (x86-64 only)", false}};
    }
    return {};
#endif
}

constexpr CpuIsa kLevels[] = {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512,
                              CpuIsa::kAvx512Bf16};

CpuIsa detect() {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
#endif
    CpuIsa best = CpuIsa::kGeneric;
    for (CpuIsa level : kLevels) {
        for (const Feature& f : features_of(level)) {
            if (!f.present) return best;
        }
        best = level;
    }
    return best;
}

// The cap from the environment; the highest level when the variable is unset or empty.
CpuIsa read_cap() {
    const char* value = std::getenv(kEnvVar);
    if (value == nullptr || *value == '\0') return CpuIsa::kAvx512Bf16;
    const std::string s(value);
    for (CpuIsa level : kLevels) {
        if (s == cpu_isa_name(level)) return level;
    }
    throw ConfigError(std::string(kEnvVar) +
                      " must be one of generic, avx2, avx512, avx512bf16 (got '" + s + "')");
}

struct State {
    CpuIsa detected;
    CpuIsa capped;
};

const State& state() {
    static const State s = [] {
        const CpuIsa detected = detect();
        const CpuIsa cap = read_cap();
        return State{detected, cap < detected ? cap : detected};
    }();
    return s;
}

}  // namespace

CpuIsa cpu_isa() { return state().capped; }
CpuIsa detected_cpu_isa() { return state().detected; }
bool cpu_isa_capped() { return state().capped < state().detected; }

const char* cpu_isa_name(CpuIsa isa) {
    switch (isa) {
        case CpuIsa::kGeneric: return "generic";
        case CpuIsa::kAvx2: return "avx2";
        case CpuIsa::kAvx512: return "avx512";
        case CpuIsa::kAvx512Bf16: return "avx512bf16";
    }
    return "generic";
}

std::string cpu_isa_shortfall(CpuIsa isa) {
    if (cpu_isa() >= isa) return "";
    std::string missing;
    for (CpuIsa level : kLevels) {
        if (level > isa) break;
        for (const Feature& f : features_of(level)) {
            if (!f.present) missing += (missing.empty() ? "" : ", ") + std::string(f.name);
        }
    }
    if (!missing.empty()) return "this CPU lacks " + missing;
    return std::string("capped by ") + kEnvVar + "=" + cpu_isa_name(cpu_isa());
}

}  // namespace pylookahead
