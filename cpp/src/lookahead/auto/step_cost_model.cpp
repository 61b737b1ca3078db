#include "lookahead/auto/step_cost_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "check.h"
#include "pylookahead/errors.h"

namespace pylookahead {

double median(std::vector<double> v) {
    PYLA_CHECK(!v.empty(), "median of nothing");
    const size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + mid, v.end());
    double m = v[mid];
    if (v.size() % 2 == 0) {
        m = 0.5 * (m + *std::max_element(v.begin(), v.begin() + mid));
    }
    return m;
}

namespace {

void push_capped(std::deque<double>* q, double value, size_t keep) {
    q->push_back(value);
    while (q->size() > keep) q->pop_front();
}

}  // namespace

void StepCostModel::set_table(std::vector<StepCost> table) {
    if (table.empty()) throw ConfigError("step cost table must not be empty");
    std::sort(table.begin(), table.end(),
              [](const StepCost& a, const StepCost& b) { return a.tokens < b.tokens; });
    for (size_t i = 0; i < table.size(); ++i) {
        const StepCost& c = table[i];
        if (c.tokens < 1 || c.tokens > 4096) {
            throw ConfigError("step cost tokens must be in [1, 4096] (got " +
                              std::to_string(c.tokens) + ")");
        }
        if (!(c.seconds > 0.0) || !std::isfinite(c.seconds)) {
            throw ConfigError("step cost seconds must be finite and > 0 (got " +
                              std::to_string(c.seconds) + " for " + std::to_string(c.tokens) +
                              " tokens)");
        }
        if (i > 0 && table[i - 1].tokens == c.tokens) {
            throw ConfigError("step cost table lists " + std::to_string(c.tokens) +
                              " tokens twice");
        }
    }
    if (table.front().tokens != 1) {
        throw ConfigError(
            "step cost table must have an entry for 1 token (a greedy step); "
            "smallest given: " +
            std::to_string(table.front().tokens));
    }
    table_ = std::move(table);
    clear_measurements();
}

double StepCostModel::table_seconds(int tokens) const {
    PYLA_CHECK(!table_.empty(), "no step cost table");
    const double floor = 0.01 * table_.front().seconds;
    if (table_.size() == 1 || tokens <= table_.front().tokens) return table_.front().seconds;
    size_t hi = 1;
    while (hi + 1 < table_.size() && table_[hi].tokens < tokens) ++hi;
    const StepCost& a = table_[hi - 1];
    const StepCost& b = table_[hi];
    const double slope = (b.seconds - a.seconds) / static_cast<double>(b.tokens - a.tokens);
    return std::max(floor, a.seconds + slope * static_cast<double>(tokens - a.tokens));
}

void StepCostModel::observe(int tokens, double seconds) {
    if (!(seconds > 0.0) || !std::isfinite(seconds)) return;
    // The medians are kept here, once per step, since the planner reads seconds() for many T.
    std::deque<double>& m = measured_[tokens];
    push_capped(&m, seconds, kKeep);
    if (static_cast<int>(m.size()) >= kMinSamples) {
        measured_median_[tokens] = median(std::vector<double>(m.begin(), m.end()));
    }
    if (tokens == 1 && !table_.empty()) {
        push_capped(&ratios_, seconds / table_seconds(1), kKeep);
        drift_ = median(std::vector<double>(ratios_.begin(), ratios_.end()));
    }
}

int StepCostModel::samples(int tokens) const {
    auto it = measured_.find(tokens);
    return it == measured_.end() ? 0 : static_cast<int>(it->second.size());
}

double StepCostModel::drift() const { return drift_; }

double StepCostModel::seconds(int tokens) const {
    auto it = measured_median_.find(tokens);
    if (it != measured_median_.end()) return it->second;
    return table_seconds(tokens) * drift_;
}

void StepCostModel::clear_measurements() {
    measured_.clear();
    measured_median_.clear();
    ratios_.clear();
    drift_ = 1.0;
}

}  // namespace pylookahead
