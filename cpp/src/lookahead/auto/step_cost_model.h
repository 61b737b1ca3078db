// The step-cost model of automatic lookahead and draft-tree sizing (std-only): seconds of one decode
// step against its tokens per step, from a calibrated table corrected by measured step times.
#pragma once

#include <deque>
#include <map>
#include <vector>

#include "pylookahead/types.h"

namespace pylookahead {

// The median of `values` (the mean of the middle two for an even count); not empty.
double median(std::vector<double> values);

// Seconds of one decode step against its tokens per step T.
class StepCostModel {
  public:
    // `table`: ascending distinct tokens >= 1 (one entry must have tokens == 1), finite seconds
    // > 0. Throws ConfigError otherwise. Clears the measurements.
    void set_table(std::vector<StepCost> table);
    const std::vector<StepCost>& table() const { return table_; }
    bool has_table() const { return !table_.empty(); }
    // Largest T in the table (0 without a table).
    int max_tokens() const { return table_.empty() ? 0 : table_.back().tokens; }

    // Table seconds at T: piecewise linear between points, linear extrapolation beyond the last
    // two (never below 1% of the T = 1 cost). Requires has_table().
    double table_seconds(int tokens) const;

    // A measured step of T tokens.
    void observe(int tokens, double seconds);
    // Best estimate now: the median of the last measured steps of exactly T tokens when there
    // are at least kMinSamples, else table_seconds(T) * drift(), where drift is the median
    // measured / table ratio of the last greedy (T = 1) steps, 1 before any. So the table's
    // shape holds until a T is measured, its scale follows the greedy steps, and a measured
    // lookahead step is always compared with the greedy cost measured or calibrated, never with
    // one rescaled from lookahead steps themselves.
    double seconds(int tokens) const;
    double drift() const;
    int samples(int tokens) const;
    void clear_measurements();

    static constexpr int kMinSamples = 3;
    static constexpr int kKeep = 32;

  private:
    std::vector<StepCost> table_;
    std::map<int, std::deque<double>> measured_;  // T -> last kKeep step seconds
    std::map<int, double> measured_median_;       // T -> median of measured_[T] (>= kMinSamples)
    std::deque<double> ratios_;                   // last kKeep greedy measured / table_seconds(1)
    double drift_ = 1.0;                          // median of ratios_ (1 when empty)
};

}  // namespace pylookahead
