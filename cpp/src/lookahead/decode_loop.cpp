#include "lookahead/decode_loop.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "check.h"
#include "lookahead/lookahead_algorithm.h"
#include "lookahead/step_layout.h"
#include "pylookahead/errors.h"

namespace pylookahead {

namespace {

double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

bool same_config(const std::optional<LookaheadConfig>& a, const std::optional<LookaheadConfig>& b) {
    return same_shape(a, b) && (!a || (a->seed == b->seed && a->seed_from_prompt == b->seed_from_prompt));
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
    request.sampling.validate();
    if (request.reuse_rows < 0 || request.reuse_rows >= static_cast<int64_t>(request.prompt.size())) {
        throw ConfigError("reuse_rows must be in [0, prompt size) (got " +
                          std::to_string(request.reuse_rows) + ")");
    }
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
                            const std::function<StreamControl(const std::vector<TokenId>&)>& on_tokens) {
    validate_request(request);
    StepPolicy* const policy = request.policy;
    PYLA_CHECK(!(policy && request.lookahead), "both a lookahead config and an automatic policy");
    const std::function<double()> now = request.clock ? request.clock : steady_seconds;
    std::optional<LookaheadAlgorithm> algo;
    std::optional<LookaheadConfig> running;  // config of `algo` (nullopt: greedy steps)
    if (request.lookahead) {
        running = request.lookahead;
        algo.emplace(*request.lookahead, request.pool, model.prefers_fixed_shapes());
    }
    std::optional<TokenSampler> sampler_storage;
    if (request.sampling.temperature > 0.0) sampler_storage.emplace(request.sampling);
    TokenSampler* const sampler = sampler_storage ? &*sampler_storage : nullptr;
    bool keep_pool = request.keep_pool;  // the first lookahead run's; later runs keep it
    const int tokens_per_step = policy ? std::max(1, policy->max_tokens_per_step())
                                       : (algo ? algo->budget().tokens_per_step : 1);
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
    const int max_n = policy ? policy->max_ngram_size() : (algo ? algo->budget().max_accept : 1);
    stats.accept_histogram.assign(max_n + 1, 0);
    Emitter emitter(request, &result);
    std::vector<TokenId> argmax;
    // Emits a step's tokens, reports them, and returns how many were kept.
    auto finish_step = [&](const std::vector<TokenId>& tokens) {
        int kept = emitter.emit(tokens);
        if (on_tokens) {
            const std::vector<TokenId> chunk(result.tokens.end() - kept, result.tokens.end());
            const StreamControl control = on_tokens(chunk);
            if (control.stop) {
                if (control.keep < -1 || control.keep > kept) {
                    throw ConfigError("on_tokens: keep must be in [0, " + std::to_string(kept) +
                                      "] (the chunk size) or -1 (got " +
                                      std::to_string(control.keep) + ")");
                }
                if (control.keep >= 0 && control.keep < kept) {
                    result.tokens.resize(result.tokens.size() - (kept - control.keep));
                    kept = control.keep;
                    emitter.stop(StopReason::kCallback);
                } else if (!emitter.stopped()) {
                    emitter.stop(StopReason::kCallback);
                }
            }
        }
        if (policy) policy->on_emitted(result.tokens.data() + result.tokens.size() - kept, kept);
        return kept;
    };

    // Prefill: the prompt after the reused rows, causal; its last row gives the first new token.
    const int reused = request.reuse_rows;
    PYLA_CHECK(reused <= model.kv_len(), "reuse_rows " << reused << " > kv_len " << model.kv_len());
    model.truncate(reused);
    stats.reused_tokens = reused;
    stats.prompt_tokens = prompt_len - reused;
    if (policy) policy->start(request.prompt);
    const double prefill_start = now();
    const int64_t fresh = prompt_len - reused;
    std::vector<int32_t> positions(fresh), rows(fresh);
    for (int64_t i = 0; i < fresh; ++i) {
        positions[i] = static_cast<int32_t>(reused + i);
        rows[i] = static_cast<int32_t>(i);
    }
    const std::vector<TokenId> fresh_tokens(request.prompt.begin() + reused, request.prompt.end());
    model.forward_step(fresh_tokens, positions, nullptr, {static_cast<int32_t>(fresh - 1)},
                       /*exact_rows=*/{}, &argmax, sampler);
    model.commit(rows);
    stats.prefill_s = now() - prefill_start;
    PYLA_CHECK(argmax.size() == 1, "prefill returned " << argmax.size() << " argmax rows");
    TokenId x = argmax[0];
    finish_step({x});
    bool ran_lookahead = false;  // whether a lookahead run used request.pool
    if (algo && !emitter.stopped()) {
        algo->start(request.prompt, x, keep_pool);
        keep_pool = true;
        ran_lookahead = true;
    }

    // Token recycling reads the k best tokens of every out row; the model keeps them only while
    // this generation runs.
    const int successors_k =
        algo && algo->successors_wanted() > 0 ? model.set_successors(algo->successors_wanted()) : 0;
    struct StopSuccessors {
        StepModel& model;
        bool on;
        ~StopSuccessors() {
            if (on) model.set_successors(0);
        }
    } stop_successors{model, successors_k > 0};

    const double decode_start = now();
    std::vector<TokenId> history;  // auto mode: prompt + emitted tokens but the last, on a switch
    while (!emitter.stopped()) {
        const double step_start = now();
        if (policy) {
            std::optional<LookaheadConfig> want = policy->next_step(stats.steps);
            if (want) want->validate();
            if (!same_config(want, running) || (want && !algo)) {
                // A new lookahead run starts from the whole history: its pool is seeded with
                // every n-gram of prompt + emitted text, its window drawn from it.
                running = want;
                algo.reset();
                if (running) {
                    PYLA_CHECK(running->tokens_per_step() <= tokens_per_step,
                               "policy asked for " << running->tokens_per_step()
                                                   << " tokens per step, above its maximum "
                                                   << tokens_per_step);
                    algo.emplace(*running, request.pool, model.prefers_fixed_shapes());
                    history.assign(request.prompt.begin(), request.prompt.end());
                    history.insert(history.end(), result.tokens.begin(), result.tokens.end() - 1);
                    algo->start(history, x, keep_pool);
                    keep_pool = true;
                    ran_lookahead = true;
                }
            }
        }
        const int32_t p = static_cast<int32_t>(prompt_len + result.tokens.size() - 1);  // of x
        PYLA_CHECK(model.kv_len() == p, "kv_len " << model.kv_len() << " != position " << p);
        int kept = 0;
        StepReport report;
        report.step = stats.steps;
        if (algo) {
            // plan -> forward -> verify -> commit; emitting happens in between.
            const StepPlan& plan = algo->prepare(x);
            const int t = plan.rows();
            positions.resize(t);
            for (int i = 0; i < t; ++i) positions[i] = p + plan.offsets[i];
            model.forward_step(plan.tokens, positions, plan.mask.data(), plan.out_rows,
                               plan.exact_rows, &argmax, sampler);
            const StepOutcome outcome =
                algo->update(argmax, successors_k > 0 ? &model.successors() : nullptr, successors_k);
            kept = finish_step(outcome.emitted);
            model.commit(std::vector<int32_t>(outcome.commit_rows.begin(),
                                              outcome.commit_rows.begin() + kept));
            // Credit only the kept tokens' sources (a stop may cut an accepted path).
            const int kept_drafts = std::min(kept, outcome.num_accepted);
            for (int i = 0; i < kept_drafts; ++i) {
                const int row = outcome.commit_rows[i + 1] - plan.tree_begin;
                ++stats.accepted_tokens_by_source[static_cast<size_t>(plan.nodes[row].source)];
            }
            if (outcome.num_accepted > 0) {
                const DraftSource first = plan.nodes[outcome.commit_rows[1] - plan.tree_begin].source;
                if (first == DraftSource::kWindow) ++stats.accepted_from_window;
                if (first == DraftSource::kHistory) ++stats.accepted_from_prompt;
            }
            ++stats.lookahead_steps;
            report.tokens_per_step = t;
            report.num_candidates = outcome.num_candidates;
            report.window_candidates = outcome.window_candidates;
            report.window_matched = outcome.window_matched;
        } else {
            model.forward_step({x}, {p}, nullptr, {0}, /*exact_rows=*/{0}, &argmax, sampler);
            PYLA_CHECK(argmax.size() == 1, "greedy step returned " << argmax.size() << " rows");
            kept = finish_step({argmax[0]});
            model.commit(kept > 0 ? std::vector<int32_t>{0} : std::vector<int32_t>{});
        }
        x = result.tokens.empty() ? x : result.tokens.back();
        ++stats.steps;
        ++stats.accept_histogram[kept];
        const double step_s = now() - step_start;
        stats.step_times_s.push_back(step_s);
        if (policy) {
            report.seconds = step_s;
            report.tokens = kept;
            policy->after_step(report);
        }
    }
    stats.decode_s = now() - decode_start;
    stats.new_tokens = static_cast<int64_t>(result.tokens.size());
    if (algo) stats.pool_size = algo->pool_size();
    if (ran_lookahead && request.pool) {
        // The text that the pool's n-grams came from, for a later run with a larger N.
        std::vector<TokenId> text = request.prompt;
        text.insert(text.end(), result.tokens.begin(), result.tokens.end());
        std::lock_guard<std::mutex> lock(request.pool->mutex);
        request.pool->add_text(std::move(text));
    }
    if (policy) stats.auto_decisions = policy->decisions();
    return result;
}

std::vector<StepCost> calibrate_step_costs(StepModel& model, const CalibrationOptions& options) {
    PYLA_CHECK(options.vocab_size >= 1 && options.repetitions >= 1 && options.max_tokens >= 1,
               "bad calibration options");
    const std::function<double()> now = options.clock ? options.clock : steady_seconds;
    // Calibrate after the rows the cache holds (a conversation's context stays usable), or from
    // an empty cache when there is not enough room left after them.
    int base = model.kv_len();
    if (model.kv_capacity() - base < 2 * 64) base = 0;
    model.truncate(base);
    const int capacity = model.kv_capacity() - base;
    // One lookahead config per T: W = G, N = 3 (T = 4W) or N = 5 (T = 8W).
    struct Point {
        int tokens, w, n;
    };
    const Point points[] = {{1, 0, 0},  {4, 1, 3},  {8, 2, 3},    {16, 4, 3},
                            {32, 4, 5}, {64, 8, 5}, {128, 16, 5}, {256, 32, 5}};
    // The dummy context takes at most half the cache; the steps get the rest.
    const int context = std::max(1, std::min(options.context_rows, capacity / 2));
    const int max_tokens = std::min(options.max_tokens, capacity - context);
    if (max_tokens < 1) throw ConfigError("the KV cache is too small to calibrate step costs");

    uint64_t state = 0x9E3779B97F4A7C15ull;
    auto dummy = [&]() {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<TokenId>((state >> 33) % static_cast<uint64_t>(options.vocab_size));
    };
    std::vector<TokenId> tokens(context);
    std::vector<int32_t> positions(context), rows(context);
    for (int i = 0; i < context; ++i) {
        tokens[i] = dummy();
        positions[i] = base + i;
        rows[i] = i;
    }
    std::vector<TokenId> argmax;
    model.forward_step(tokens, positions, nullptr, {context - 1}, {}, &argmax, nullptr);
    model.commit(rows);

    std::vector<StepCost> table;
    for (const Point& pt : points) {
        if (pt.tokens > max_tokens || context + pt.tokens > capacity) break;
        if (pt.tokens > 64) {  // table holds 1 .. 64 here, in order
            if (table.size() < 6 || table[5].seconds >= options.extend_below * table[0].seconds) break;
        }
        StepLayout layout;
        if (pt.tokens > 1) {
            LookaheadConfig c;
            c.window_size = pt.w;
            c.ngram_size = pt.n;
            c.verification_set_size = pt.w;
            layout = build_step_layout(step_budget(c));
            PYLA_CHECK(layout.budget.tokens_per_step == pt.tokens, "calibration layout");
        } else {
            layout.offsets = {0};
            layout.out_rows = {0};
            layout.exact_rows = {0};
        }
        std::vector<TokenId> step_tokens(pt.tokens);
        std::vector<int32_t> step_positions(pt.tokens);
        for (int i = 0; i < pt.tokens; ++i) {
            step_tokens[i] = dummy();
            step_positions[i] = base + context + layout.offsets[i];
        }
        const uint8_t* mask = pt.tokens > 1 ? layout.mask.data() : nullptr;
        std::vector<double> times;
        for (int r = 0; r <= options.repetitions; ++r) {  // r = 0 warms up, untimed
            const double t0 = now();
            model.forward_step(step_tokens, step_positions, mask, layout.out_rows,
                               layout.exact_rows, &argmax, nullptr);
            const double dt = now() - t0;
            if (r > 0) times.push_back(dt);
        }
        std::sort(times.begin(), times.end());
        table.push_back(StepCost{pt.tokens, std::max(times[times.size() / 2], 1e-9)});
    }
    model.truncate(base);
    return table;
}

}  // namespace pylookahead
