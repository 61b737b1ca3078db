#include "lookahead/lookahead_algorithm.h"

#include <algorithm>

#include "check.h"

namespace pylookahead {

LookaheadAlgorithm::LookaheadAlgorithm(const LookaheadConfig& config,
                                       std::shared_ptr<SharedPool> pool, bool fixed_shapes)
    : config_(config),
      budget_(step_budget(config)),
      window_layout_(build_step_layout(window_budget(budget_))),
      fixed_shapes_(fixed_shapes),
      shared_(pool ? std::move(pool) : std::make_shared<SharedPool>()),
      window_(config.window_size, config.ngram_size),
      next_(config.window_size, 0) {
    if (config.tree()) {
        if (config.verification_set_size > 0) {
            pool_drafter_.emplace(shared_.get(), config.verification_set_size);
        }
        if (config.suffix_branches > 0) suffix_.emplace(config.suffix_branches, config.tree_rows);
        if (config.recycle_top_k > 0) recycle_.emplace(shared_.get(), config.recycle_top_k);
    }
}

int64_t LookaheadAlgorithm::pool_size() const { return shared_->size(); }

NgramPool LookaheadAlgorithm::pool() const {
    return shared_->read([](const NgramPool& pool) { return pool; });
}

void LookaheadAlgorithm::start(const std::vector<TokenId>& prompt, TokenId first_token,
                               bool keep_pool) {
    shared_->start_run(config_.ngram_size - 1,
                       NgramPool::kept_per_key(config_.verification_set_size), keep_pool);
    if (suffix_) {
        // The earlier texts only when kept: a copy, taken only by the source that searches them.
        const SharedPool::Texts kept = keep_pool ? shared_->texts() : SharedPool::Texts();
        suffix_->start(&kept, prompt, first_token);
    }
    if (recycle_) recycle_->start();
    history_.clear();
    recent_.assign(NgramPool::kContextLen + 1, NgramPool::kUnknown);
    push_recent(prompt.data(), static_cast<int>(prompt.size()));
    push_recent(&first_token, 1);
    window_.init(prompt, config_.seed);
    if (!config_.seed_from_prompt) return;
    shared_->write([&](NgramPool& pool) {
        append_history(prompt.data(), static_cast<int>(prompt.size()), &pool);
        append_history(&first_token, 1, &pool);
    });
}

void LookaheadAlgorithm::push_recent(const TokenId* tokens, int n) {
    for (int i = std::max(0, n - static_cast<int>(recent_.size())); i < n; ++i) {
        std::rotate(recent_.begin(), recent_.begin() + 1, recent_.end());
        recent_.back() = tokens[i];
    }
}

void LookaheadAlgorithm::append_history(const TokenId* tokens, int n, NgramPool* pool) {
    // Adds the N-gram that ends at each new token, oldest first (the newest is the freshest),
    // with the kContextLen tokens before its key.
    const int N = config_.ngram_size;
    TokenId context[NgramPool::kContextLen];
    for (int i = 0; i < n; ++i) {
        history_.push_back(tokens[i]);
        const int64_t size = static_cast<int64_t>(history_.size());
        if (size < N) continue;
        const int64_t start = size - N;  // of the key
        NgramPool::context_before(history_.data(), start, context);
        const TokenId* gram = history_.data() + start;
        pool->insert(gram[0], gram + 1, NgramSource::kSeed, context);
    }
}

void LookaheadAlgorithm::prepare_classic(TokenId x, std::vector<TreeNode>* nodes) {
    const int len = budget_.candidate_len();
    // recent_ ends with x: the tokens before it are the context candidates are ranked by.
    shared_->read([&](const NgramPool& pool) {
        const NgramPool::Candidates cands =
            pool.select(x, recent_.data(), budget_.verification_set_size, &order_);
        for (int c = 0; c < static_cast<int>(order_.size()); ++c) {
            const int i = order_[c];
            const DraftSource source = draft_source_of(cands.sources[i]);
            for (int k = 0; k < len; ++k) {
                TreeNode v;
                v.token = cands.tokens[static_cast<size_t>(i) * len + k];
                v.parent = k == 0 ? -1 : c * len + k - 1;
                v.depth = k + 1;
                v.source = source;
                v.rank = c;
                nodes->push_back(v);
            }
        }
    });
}

void LookaheadAlgorithm::prepare_tree(TokenId x, std::vector<TreeNode>* nodes) {
    tree_.clear();
    DraftContext ctx;
    ctx.x = x;
    ctx.recent = recent_.data();
    ctx.budget = config_.tree_rows;
    ctx.scorer = &scorer_;
    if (suffix_) suffix_->propose(ctx, &tree_);
    if (pool_drafter_) pool_drafter_->propose(ctx, &tree_);
    if (recycle_) recycle_->propose(ctx, &tree_);
    tree_.select(config_.tree_rows, nodes);
    if (costs_ == nullptr || !costs_->has_table() || nodes->empty()) return;
    // select() takes nodes best-first with parents first, so every prefix is a tree.
    double expected = 1.0;
    double best_rate = expected / costs_->seconds(budget_.verify_begin);
    size_t best_n = 0;
    for (size_t n = 1; n <= nodes->size(); ++n) {
        expected += (*nodes)[n - 1].score;
        const double rate = expected / costs_->seconds(budget_.verify_begin + static_cast<int>(n));
        if (rate > best_rate) {
            best_rate = rate;
            best_n = n;
        }
    }
    nodes->resize(best_n);
}

const StepPlan& LookaheadAlgorithm::prepare(TokenId x) {
    std::vector<TreeNode> nodes;
    if (config_.tree()) {
        prepare_tree(x, &nodes);
    } else {
        prepare_classic(x, &nodes);
    }
    const int pad_to = fixed_shapes_ ? budget_.tokens_per_step - budget_.verify_begin
                                     : static_cast<int>(nodes.size());
    build_step_plan(window_layout_, window_.cells(), x, std::move(nodes), pad_to, &plan_);
    return plan_;
}

StepOutcome LookaheadAlgorithm::update(const std::vector<TokenId>& argmax,
                                       const std::vector<TokenId>* successors, int successors_k) {
    const StepPlan& plan = plan_;
    PYLA_CHECK(argmax.size() == plan.out_rows.size(),
               "argmax has " << argmax.size() << " rows, expected " << plan.out_rows.size());
    const TokenId x = plan.tokens[0];
    const TokenId t0 = argmax[0];  // row 0 is out_rows[0] for every N
    std::copy_n(argmax.begin() + plan.out_last_level, budget_.window_size, next_.begin());

    const std::vector<TreeNode>& nodes = plan.nodes;
    TreeVerdict verdict = verify_tree(t0, nodes, argmax.data() + plan.out_tree);
    StepOutcome out;
    out.num_accepted = static_cast<int>(verdict.path.size());
    out.commit_rows.push_back(0);
    for (int32_t v : verdict.path) {
        out.commit_rows.push_back(plan.tree_begin + v);
    }
    out.emitted = std::move(verdict.emitted);
    if (config_.tree()) {
        out.num_candidates = static_cast<int>(nodes.size());
        scorer_.record(nodes, verdict.accepted);
    } else {
        // Classic nodes are whole chains of len tokens, candidate c's first at c * len.
        const int len = budget_.candidate_len();
        out.num_candidates = static_cast<int>(nodes.size()) / len;
        for (int c = 0; c < out.num_candidates; ++c) {
            if (nodes[static_cast<size_t>(c) * len].source != DraftSource::kWindow) continue;
            ++out.window_candidates;
            int matched = 0;  // accepted nodes of a chain are a prefix of it
            while (matched < len && verdict.accepted[c * len + matched]) ++matched;
            out.window_matched = std::max(out.window_matched, matched);
        }
    }
    if (recycle_ && successors != nullptr && successors_k == recycle_->top_k()) {
        // Every real out row's successors (but a row the model skipped: argmax -1, no
        // successors); rows whose context is the true text (x, then the accepted path) last, so
        // that they win over draft rows holding the same token.
        PYLA_CHECK(successors->size() == argmax.size() * successors_k, "successors size");
        const int real_rows = plan.tree_begin + static_cast<int>(nodes.size());
        row_tokens_.clear();
        row_successors_.clear();
        auto add_row = [&](int i) {
            row_tokens_.push_back(plan.tokens[plan.out_rows[i]]);
            row_successors_.insert(row_successors_.end(), successors->begin() + i * successors_k,
                                   successors->begin() + (i + 1) * successors_k);
        };
        std::vector<uint8_t> late(plan.out_rows.size(), 0);
        late[0] = 1;
        for (int32_t v : verdict.path) late[plan.out_tree + v] = 1;
        for (size_t i = 1; i < plan.out_rows.size(); ++i) {
            if (!late[i] && plan.out_rows[i] < real_rows && argmax[i] >= 0) {
                add_row(static_cast<int>(i));
            }
        }
        add_row(0);
        for (int32_t v : verdict.path) add_row(plan.out_tree + v);
        StepRows rows;
        rows.tokens = row_tokens_.data();
        rows.successors = row_successors_.data();
        rows.rows = static_cast<int>(row_tokens_.size());
        rows.k = successors_k;
        recycle_->on_step(rows);
    }

    shared_->write([&](NgramPool& pool) {
        window_.harvest(x, next_.data(), &pool);
        if (config_.seed_from_prompt) {
            append_history(out.emitted.data(), static_cast<int>(out.emitted.size()), &pool);
        }
    });
    window_.shift(next_.data());
    if (suffix_) suffix_->on_emitted(out.emitted.data(), static_cast<int>(out.emitted.size()));
    push_recent(out.emitted.data(), static_cast<int>(out.emitted.size()));
    return out;
}

}  // namespace pylookahead
