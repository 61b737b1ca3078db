#include "lookahead/decode_loop.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "check.h"
#include "lookahead/lookahead_algorithm.h"
#include "pylookahead/errors.h"

namespace pylookahead {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

void validate_request(const DecodeRequest& request) {
    if (request.prompt.empty()) throw ConfigError("prompt must not be empty (got 0 tokens)");
    for (size_t i = 0; i < request.prompt.size(); ++i) {
        if (request.prompt[i] < 0) {
            throw ConfigError("prompt token ids must be >= 0 (got " +
                              std::to_string(request.prompt[i]) + " at index " +
                              std::to_string(i) + ")");
        }
    }
    if (request.max_new_tokens < 1) {
        throw ConfigError("max_new_tokens must be >= 1 (got " +
                          std::to_string(request.max_new_tokens) + ")");
    }
    if (request.lookahead) request.lookahead->validate();
}

// Appends emitted tokens to the result, cutting at the first end id or at max_new_tokens.
class Emitter {
  public:
    Emitter(const DecodeRequest& request, GenerationResult* result)
        : request_(request), result_(result) {}

    // Returns how many of `tokens` were kept (>= 1 when tokens is non-empty).
    int emit(const std::vector<TokenId>& tokens) {
        int kept = 0;
        for (TokenId t : tokens) {
            if (stopped_) break;
            result_->tokens.push_back(t);
            ++kept;
            const auto& ends = request_.end_ids;
            if (std::find(ends.begin(), ends.end(), t) != ends.end()) {
                stop(StopReason::kEndToken);
            } else if (static_cast<int>(result_->tokens.size()) >= request_.max_new_tokens) {
                stop(StopReason::kMaxNewTokens);
            }
        }
        return kept;
    }
    void stop(StopReason reason) {
        stopped_ = true;
        result_->stop_reason = reason;
    }
    bool stopped() const { return stopped_; }

  private:
    const DecodeRequest& request_;
    GenerationResult* result_;
    bool stopped_ = false;
};

}  // namespace

GenerationResult run_decode(StepModel& model, const DecodeRequest& request,
                            const std::function<bool(const std::vector<TokenId>&)>& on_tokens) {
    validate_request(request);
    std::optional<LookaheadAlgorithm> algo;
    if (request.lookahead) algo.emplace(*request.lookahead);
    const int tokens_per_step = algo ? algo->budget().tokens_per_step : 1;
    const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
    const int64_t needed = prompt_len + request.max_new_tokens + tokens_per_step;
    if (needed > model.kv_capacity()) {
        throw ConfigError("prompt (" + std::to_string(prompt_len) + " tokens) + max_new_tokens (" +
                          std::to_string(request.max_new_tokens) + ") + tokens per step (" +
                          std::to_string(tokens_per_step) + ") = " + std::to_string(needed) +
                          " must be <= kv_capacity (" + std::to_string(model.kv_capacity()) + ")");
    }

    GenerationResult result;
    GenerationStats& stats = result.stats;
    stats.prompt_tokens = prompt_len;
    stats.accept_histogram.assign(algo ? algo->budget().max_accept + 1 : 2, 0);
    Emitter emitter(request, &result);
    std::vector<TokenId> argmax;
    // Emits a step's tokens, reports them, and returns how many were kept.
    auto finish_step = [&](const std::vector<TokenId>& tokens) {
        const int kept = emitter.emit(tokens);
        const std::vector<TokenId> chunk(result.tokens.end() - kept, result.tokens.end());
        const bool go_on = !on_tokens || on_tokens(chunk);
        if (!go_on && !emitter.stopped()) emitter.stop(StopReason::kCallback);
        return kept;
    };

    // Prefill: the whole prompt, causal; its last row gives the first new token.
    model.reset();
    const auto prefill_start = Clock::now();
    std::vector<int32_t> positions(prompt_len);
    for (int64_t i = 0; i < prompt_len; ++i) positions[i] = static_cast<int32_t>(i);
    model.forward_step(request.prompt, positions, nullptr, {static_cast<int32_t>(prompt_len - 1)},
                       /*exact_rows=*/{}, &argmax);
    model.commit(positions);  // rows 0..L-1, which are also the positions
    stats.prefill_s = seconds_since(prefill_start);
    PYLA_CHECK(argmax.size() == 1, "prefill returned " << argmax.size() << " argmax rows");
    TokenId x = argmax[0];
    finish_step({x});
    if (algo) algo->start(request.prompt, x);

    const auto decode_start = Clock::now();
    while (!emitter.stopped()) {
        const auto step_start = Clock::now();
        const int32_t p = static_cast<int32_t>(prompt_len + result.tokens.size() - 1);  // of x
        PYLA_CHECK(model.kv_len() == p, "kv_len " << model.kv_len() << " != position " << p);
        int kept = 0;
        if (algo) {
            const StepLayout& layout = algo->layout();
            const std::vector<TokenId>& tokens = algo->prepare(x);
            positions.resize(tokens.size());
            for (size_t i = 0; i < tokens.size(); ++i) positions[i] = p + layout.offsets[i];
            model.forward_step(tokens, positions, layout.mask.data(), layout.out_rows,
                               layout.exact_rows, &argmax);
            const StepOutcome outcome = algo->update(argmax);
            kept = finish_step(outcome.emitted);
            model.commit(std::vector<int32_t>(outcome.commit_rows.begin(),
                                              outcome.commit_rows.begin() + kept));
            if (outcome.num_accepted > 0) {
                ++(outcome.source == NgramSource::kWindow ? stats.accepted_from_window
                                                          : stats.accepted_from_prompt);
            }
        } else {
            model.forward_step({x}, {p}, nullptr, {0}, /*exact_rows=*/{0}, &argmax);
            PYLA_CHECK(argmax.size() == 1, "greedy step returned " << argmax.size() << " rows");
            kept = finish_step({argmax[0]});
            model.commit({0});
        }
        x = result.tokens.back();
        ++stats.steps;
        ++stats.accept_histogram[kept];
        stats.step_times_s.push_back(seconds_since(step_start));
    }
    stats.decode_s = seconds_since(decode_start);
    stats.new_tokens = static_cast<int64_t>(result.tokens.size());
    if (algo) stats.pool_size = algo->pool().size();
    return result;
}

}  // namespace pylookahead
