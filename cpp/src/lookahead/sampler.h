// Token selection for sampled decoding, std-only. The draw for a token is a pure function of
// (the logits of its row, the sampling options, the seed, its absolute position), so that
// lookahead decoding, which sees the same logits bit for bit at every position it keeps, emits
// exactly the tokens that plain one-token-per-step sampling emits for the same seed.
#pragma once

#include <cstdint>
#include <vector>

#include "pylookahead/config.h"
#include "pylookahead/types.h"

namespace pylookahead {

// A uniform double in [0, 1) that depends only on (seed, position): a counter-based stream (the
// SplitMix64 finalizer applied twice), so any position can be drawn in any order, any number of
// times, with the same result. 53 random bits.
double uniform_at(uint64_t seed, int64_t position);

// Draws tokens from logits with temperature, top-k and top-p (in that order, as transformers
// applies them). With temperature 0 it returns the argmax (ties to the lowest id).
//
// The draw: the kept tokens are listed in a fixed order (ascending id when neither top-k nor
// top-p is on; otherwise descending probability, ties to the lower id), their weights
// exp((logit - max) / temperature) are accumulated in double in that order, and the first token
// whose running sum exceeds uniform_at(seed, position) * total is returned.
// Not thread-safe (scratch buffers); cheap to construct.
class TokenSampler {
  public:
    // `config` must be valid (GenerationConfig::validate()); its sampling fields are copied.
    explicit TokenSampler(const GenerationConfig& config);

    // logits [vocab] (fp32). position: absolute position (0-based) of the token being drawn.
    TokenId sample(const float* logits, int vocab, int64_t position);

    bool greedy() const { return temperature_ == 0.0; }
    double temperature() const { return temperature_; }
    int top_k() const { return top_k_; }
    double top_p() const { return top_p_; }
    uint64_t seed() const { return seed_; }

  private:
    double temperature_;
    int top_k_;
    double top_p_;
    uint64_t seed_;
    std::vector<int32_t> ids_;     // scratch: candidate ids
    std::vector<double> weights_;  // scratch: [vocab] unnormalised probabilities
};

}  // namespace pylookahead
