// GenerationConfig with sampling options, for the sampler and sampled-decoding tests.
#pragma once

#include <cstdint>

#include "pylookahead/config.h"

namespace pylookahead {

inline GenerationConfig sampling_config(double temperature, int top_k, double top_p,
                                        uint64_t seed) {
    GenerationConfig g;
    g.temperature = temperature;
    g.top_k = top_k;
    g.top_p = top_p;
    g.seed = seed;
    return g;
}

}  // namespace pylookahead
