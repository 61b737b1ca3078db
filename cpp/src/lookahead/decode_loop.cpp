#include "lookahead/decode_loop.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>
#include <utility>

#include "check.h"
#include "lookahead/auto/step_cost_model.h"
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
    return same_shape(a, b) &&
           (!a || (a->seed == b->seed && a->seed_from_prompt == b->seed_from_prompt));
}

bool valid(const LookaheadConfig& config) {
    try {
        config.validate();
        return true;
    } catch (const ConfigError&) {
        return false;
    }
}

// The request's invariants (Session::generate validates what users pass).
void check_request(const DecodeRequest& request) {
    PYLA_CHECK(!request.prompt.empty(), "empty prompt");
    for (TokenId id : request.prompt) PYLA_CHECK(id >= 0, "negative prompt token id " << id);
    PYLA_CHECK(request.max_new_tokens >= 1, "max_new_tokens " << request.max_new_tokens);
    PYLA_CHECK(!request.lookahead || valid(*request.lookahead), "invalid LookaheadConfig");
    PYLA_CHECK(!(request.lookahead && request.policy), "both a LookaheadConfig and a policy");
    PYLA_CHECK(
        request.reuse_rows >= 0 && request.reuse_rows < static_cast<int64_t>(request.prompt.size()),
        "reuse_rows " << request.reuse_rows << " for a prompt of " << request.prompt.size());
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
            result_->token_ids.push_back(t);
            ++kept;
            const auto& ends = request_.end_ids;
            if (std::find(ends.begin(), ends.end(), t) != ends.end()) {
                stop(StopReason::kEndToken);
            } else if (static_cast<int>(result_->token_ids.size()) >= request_.max_new_tokens) {
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

using OnTokens = std::function<StreamControl(const std::vector<TokenId>&)>;

// One run_decode call: prefill, then steps (plan -> forward -> verify -> emit -> commit) until a
// stop, then the statistics. Not reusable: one object per call.
class DecodeRun {
  public:
    DecodeRun(StepModel& model, const DecodeRequest& request, const OnTokens& on_tokens)
        : model_(model),
          request_(request),
          on_tokens_(on_tokens),
          policy_(request.policy),
          now_(request.clock ? request.clock : steady_seconds),
          emitter_(request, &result_),
          keep_pool_(request.keep_pool) {
        PYLA_CHECK(!(policy_ && request.lookahead),
                   "both a lookahead config and an automatic policy");
        if (request.sampling.temperature > 0.0) sampler_.emplace(request.sampling);
    }
    ~DecodeRun() {
        if (successors_k_ > 0) model_.set_successors(0);
    }

    GenerationResult run() {
        check_capacity();
        GenerationStats& stats = result_.stats;
        const int max_n = policy_
                              ? policy_->max_step_tokens()  // most tokens one step emits
                              : (request_.lookahead ? request_.lookahead->max_step_tokens() : 1);
        stats.accept_histogram.assign(max_n + 1, 0);
        TokenId x = prefill();
        if (request_.lookahead && !emitter_.stopped()) {
            start_lookahead(*request_.lookahead, request_.prompt, x);
        }
        const double decode_start = now_();
        while (!emitter_.stopped()) {
            const double step_start = now_();
            if (policy_) follow_policy(x);
            const int32_t p =
                static_cast<int32_t>(request_.prompt.size() + result_.token_ids.size() - 1);
            PYLA_CHECK(model_.kv_len() == p, "kv_len " << model_.kv_len() << " != position " << p);
            StepReport report;
            report.step = stats.steps;
            const int kept = algo_ ? lookahead_step(x, p, &report) : greedy_step(x, p);
            if (!result_.token_ids.empty()) x = result_.token_ids.back();
            ++stats.steps;
            ++stats.accept_histogram[kept];
            const double step_s = now_() - step_start;
            stats.step_times_s.push_back(step_s);
            if (policy_) {
                report.seconds = step_s;
                report.tokens = kept;
                policy_->after_step(report);
            }
        }
        stats.decode_s = now_() - decode_start;
        finish();
        return std::move(result_);
    }

  private:
    TokenSampler* sampler() { return sampler_ ? &*sampler_ : nullptr; }

    // The prompt, max_new_tokens and the widest step must fit the cache.
    void check_capacity() {
        tokens_per_step_ = policy_
                               ? std::max(1, policy_->max_tokens_per_step())
                               : (request_.lookahead ? request_.lookahead->tokens_per_step() : 1);
        const int64_t needed = static_cast<int64_t>(request_.prompt.size()) +
                               request_.max_new_tokens + tokens_per_step_;
        PYLA_CHECK(needed <= model_.kv_capacity(),
                   "prompt + max_new_tokens + tokens per step = " << needed << " > kv_capacity "
                                                                  << model_.kv_capacity());
    }

    // The prompt after the reused rows, causal; its last row gives the first new token.
    TokenId prefill() {
        GenerationStats& stats = result_.stats;
        const int reused = request_.reuse_rows;
        PYLA_CHECK(reused <= model_.kv_len(),
                   "reuse_rows " << reused << " > kv_len " << model_.kv_len());
        model_.truncate(reused);
        const int64_t prompt_len = static_cast<int64_t>(request_.prompt.size());
        stats.reused_tokens = reused;
        stats.prompt_tokens = prompt_len - reused;
        if (policy_) policy_->start(request_.prompt);
        const double start = now_();
        const int64_t fresh = prompt_len - reused;
        std::vector<int32_t> rows(fresh);
        positions_.resize(fresh);
        for (int64_t i = 0; i < fresh; ++i) {
            positions_[i] = static_cast<int32_t>(reused + i);
            rows[i] = static_cast<int32_t>(i);
        }
        const std::vector<TokenId> tokens(request_.prompt.begin() + reused, request_.prompt.end());
        model_.forward_step(tokens, positions_, nullptr, {static_cast<int32_t>(fresh - 1)},
                            /*exact_rows=*/{}, /*out_parent=*/{}, &argmax_, sampler());
        model_.commit(rows);
        stats.prefill_s = now_() - start;
        PYLA_CHECK(argmax_.size() == 1, "prefill returned " << argmax_.size() << " argmax rows");
        const TokenId x = argmax_[0];
        emit({x});
        return x;
    }

    // A lookahead run of `config` from `history` (the text before x).
    void start_lookahead(const LookaheadConfig& config, const std::vector<TokenId>& history,
                         TokenId x) {
        running_ = config;
        const bool fixed = model_.prefers_fixed_shapes();
        algo_.emplace(config, request_.pool, fixed);
        if (!fixed) algo_->set_step_costs(request_.step_costs);
        algo_->start(history, x, keep_pool_);
        keep_pool_ = true;  // later runs keep what this one learned
        ran_lookahead_ = true;
        // Token recycling reads the k best tokens of every out row; the model keeps them only
        // while this generation runs (the destructor turns them off).
        const int want = algo_->successors_wanted();
        if (want != successors_k_) successors_k_ = model_.set_successors(want);
    }

    // Auto mode: asks the policy for this step's config; a change restarts lookahead from the
    // whole history (its pool seeded with every n-gram of prompt + emitted text).
    void follow_policy(TokenId x) {
        std::optional<LookaheadConfig> want = policy_->next_step(result_.stats.steps);
        PYLA_CHECK(!want || valid(*want), "the policy asked for an invalid LookaheadConfig");
        if (same_config(want, running_) && (!want || algo_)) return;
        running_ = want;
        algo_.reset();
        if (!want) return;
        PYLA_CHECK(want->tokens_per_step() <= tokens_per_step_,
                   "policy asked for " << want->tokens_per_step()
                                       << " tokens per step, above its maximum "
                                       << tokens_per_step_);
        history_.assign(request_.prompt.begin(), request_.prompt.end());
        history_.insert(history_.end(), result_.token_ids.begin(), result_.token_ids.end() - 1);
        start_lookahead(*want, history_, x);
    }

    int lookahead_step(TokenId x, int32_t p, StepReport* report) {
        GenerationStats& stats = result_.stats;
        const StepPlan& plan = algo_->prepare(x);
        const int t = plan.rows();
        positions_.resize(t);
        for (int i = 0; i < t; ++i) positions_[i] = p + plan.offsets[i];
        model_.forward_step(plan.tokens, positions_, plan.mask.data(), plan.out_rows,
                            plan.exact_rows, plan.out_parent, &argmax_, sampler());
        stats.skipped_head_rows += std::count(argmax_.begin(), argmax_.end(), TokenId{-1});
        const StepOutcome outcome = algo_->update(
            argmax_, successors_k_ > 0 ? &model_.successors() : nullptr, successors_k_);
        const int kept = emit(outcome.emitted);
        model_.commit(
            std::vector<int32_t>(outcome.commit_rows.begin(), outcome.commit_rows.begin() + kept));
        // Credit only the kept tokens' sources (a stop may cut an accepted path).
        for (int i = 0; i < std::min(kept, outcome.num_accepted); ++i) {
            const TreeNode& v = plan.nodes[outcome.commit_rows[i + 1] - plan.tree_begin];
            ++stats.accepted_tokens_by_source[static_cast<size_t>(v.source)];
        }
        if (outcome.num_accepted > 0) {
            const DraftSource first = plan.nodes[outcome.commit_rows[1] - plan.tree_begin].source;
            if (first == DraftSource::kWindow) ++stats.accepted_from_window;
            if (first == DraftSource::kHistory) ++stats.accepted_from_prompt;
        }
        ++stats.lookahead_steps;
        report->tokens_per_step = t;
        report->num_candidates = outcome.num_candidates;
        report->window_candidates = outcome.window_candidates;
        report->window_matched = outcome.window_matched;
        return kept;
    }

    int greedy_step(TokenId x, int32_t p) {
        model_.forward_step({x}, {p}, nullptr, {0}, /*exact_rows=*/{0}, /*out_parent=*/{}, &argmax_,
                            sampler());
        PYLA_CHECK(argmax_.size() == 1, "greedy step returned " << argmax_.size() << " rows");
        const int kept = emit({argmax_[0]});
        model_.commit(kept > 0 ? std::vector<int32_t>{0} : std::vector<int32_t>{});
        return kept;
    }

    // Emits a step's tokens, reports them to on_tokens and the policy; returns how many were kept.
    int emit(const std::vector<TokenId>& tokens) {
        std::vector<TokenId>& out = result_.token_ids;
        int kept = emitter_.emit(tokens);
        if (on_tokens_) {
            const std::vector<TokenId> chunk(out.end() - kept, out.end());
            const StreamControl control = on_tokens_(chunk);
            if (control.stop) {
                if (control.keep < -1 || control.keep > kept) {
                    throw ConfigError("on_tokens: keep must be in [0, " + std::to_string(kept) +
                                      "] (the chunk size) or -1 (got " +
                                      std::to_string(control.keep) + ")");
                }
                if (control.keep >= 0 && control.keep < kept) {
                    out.resize(out.size() - (kept - control.keep));
                    kept = control.keep;
                    emitter_.stop(StopReason::kCallback);
                } else if (!emitter_.stopped()) {
                    emitter_.stop(StopReason::kCallback);
                }
            }
        }
        if (policy_) policy_->on_emitted(out.data() + out.size() - kept, kept);
        return kept;
    }

    void finish() {
        GenerationStats& stats = result_.stats;
        stats.new_tokens = static_cast<int64_t>(result_.token_ids.size());
        if (algo_) stats.pool_size = algo_->pool_size();
        if (ran_lookahead_ && request_.pool) {
            // The text that the pool's n-grams came from, for a later run with a larger N (and
            // for suffix lookup in later runs that keep the pool).
            std::vector<TokenId> text = request_.prompt;
            text.insert(text.end(), result_.token_ids.begin(), result_.token_ids.end());
            request_.pool->add_text(std::move(text));
        }
        if (policy_) stats.auto_decisions = policy_->decisions();
    }

    StepModel& model_;
    const DecodeRequest& request_;
    const OnTokens& on_tokens_;
    StepPolicy* const policy_;
    const std::function<double()> now_;
    GenerationResult result_;
    Emitter emitter_;
    std::optional<TokenSampler> sampler_;
    std::optional<LookaheadAlgorithm> algo_;
    std::optional<LookaheadConfig> running_;  // config of algo_ (nullopt: greedy steps)
    bool keep_pool_;                          // whether the next lookahead run keeps the pool
    bool ran_lookahead_ = false;              // whether a lookahead run used request.pool
    int tokens_per_step_ = 1;                 // the widest step allowed
    int successors_k_ = 0;                    // what the model provides (token recycling)
    std::vector<TokenId> argmax_;
    std::vector<int32_t> positions_;
    std::vector<TokenId> history_;  // auto: prompt + emitted but the last, on a switch
};

}  // namespace

GenerationResult run_decode(StepModel& model, const DecodeRequest& request,
                            const OnTokens& on_tokens) {
    check_request(request);
    return DecodeRun(model, request, on_tokens).run();
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
    // One lookahead config per T: T = 2, 3 one candidate and no window (W = 0, G = 1, N = T),
    // the steps a CPU runs most, whose cost is not a line from 1 to 4 rows (it follows the
    // linear kernels' tile shapes); from T = 4 on W = G, N = 3 (T = 4W) or N = 5 (T = 8W).
    struct Point {
        int tokens, w, n, g;
    };
    const Point points[] = {{1, 0, 0, 0},     {2, 0, 2, 1},    {3, 0, 3, 1},  {4, 1, 3, 1},
                            {8, 2, 3, 2},     {16, 4, 3, 4},   {32, 4, 5, 4}, {64, 8, 5, 8},
                            {128, 16, 5, 16}, {256, 32, 5, 32}};
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
    model.forward_step(tokens, positions, nullptr, {context - 1}, {}, {}, &argmax, nullptr);
    model.commit(rows);

    // One step of each point, prepared once: its layout and dummy tokens.
    struct Step {
        int tokens;
        StepLayout layout;
        std::vector<TokenId> ids;
        std::vector<int32_t> positions;
    };
    auto prepare = [&](const Point& pt) {
        Step st;
        st.tokens = pt.tokens;
        if (pt.tokens > 1) {
            LookaheadConfig c;
            c.window_size = pt.w;
            c.ngram_size = pt.n;
            c.verification_set_size = pt.g;
            st.layout = build_step_layout(step_budget(c));
            PYLA_CHECK(st.layout.budget.tokens_per_step == pt.tokens, "calibration layout");
        } else {
            st.layout.offsets = {0};
            st.layout.out_rows = {0};
            st.layout.exact_rows = {0};
        }
        for (int i = 0; i < pt.tokens; ++i) {
            st.ids.push_back(dummy());
            st.positions.push_back(base + context + st.layout.offsets[i]);
        }
        return st;
    };
    const Step greedy = prepare(points[0]);
    // Times `steps` in rounds, each a greedy step then every step once (the first round warms
    // up, untimed), so a step and the greedy step it is compared with run moments apart: drift
    // and bursts of other load touch one round, not one point. Returns each step's seconds: the
    // median over rounds of its time over the round's greedy time, times the median greedy time.
    // Cost: (repetitions + 1) * (steps + 1) forwards.
    auto time_rounds = [&](const std::vector<Step>& steps) {
        auto run = [&](const Step& st) {
            const uint8_t* mask = st.tokens > 1 ? st.layout.mask.data() : nullptr;
            const double t0 = now();
            model.forward_step(st.ids, st.positions, mask, st.layout.out_rows, st.layout.exact_rows,
                               /*out_parent=*/{}, &argmax, nullptr);
            return now() - t0;
        };
        std::vector<double> greedy_times;
        std::vector<std::vector<double>> ratios(steps.size());
        for (int r = 0; r <= options.repetitions; ++r) {
            const double round_greedy = std::max(run(greedy), 1e-12);
            if (r > 0) greedy_times.push_back(round_greedy);
            for (size_t i = 0; i < steps.size(); ++i) {
                const double dt = run(steps[i]);
                if (r > 0) ratios[i].push_back(dt / round_greedy);
            }
        }
        const double g = median(greedy_times);
        std::vector<double> seconds;
        for (const std::vector<double>& q : ratios) seconds.push_back(median(q) * g);
        return std::make_pair(g, seconds);
    };
    // The points that fit: up to 64 tokens first; beyond, only while a step of 64 is cheap.
    std::vector<Step> near, far;
    for (size_t i = 1; i < std::size(points); ++i) {
        const Point& pt = points[i];
        if (pt.tokens > max_tokens || context + pt.tokens > capacity) break;
        (pt.tokens <= 64 ? near : far).push_back(prepare(pt));
    }
    const auto [g, near_seconds] = time_rounds(near);
    std::vector<StepCost> table{StepCost{1, std::max(g, 1e-9)}};
    for (size_t i = 0; i < near.size(); ++i)
        table.push_back(StepCost{near[i].tokens, std::max(near_seconds[i], 1e-9)});
    const bool extend = !near.empty() && near.back().tokens == 64 &&
                        table.back().seconds < options.extend_below * table[0].seconds;
    if (extend && !far.empty()) {
        // Compared with greedy steps of their own rounds, then on the table's greedy scale.
        const auto [g_far, far_seconds] = time_rounds(far);
        for (size_t i = 0; i < far.size(); ++i) {
            table.push_back(
                StepCost{far[i].tokens, std::max(far_seconds[i] / g_far * table[0].seconds, 1e-9)});
        }
    }
    model.truncate(base);
    return table;
}

}  // namespace pylookahead
