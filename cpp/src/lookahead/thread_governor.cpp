#include "lookahead/thread_governor.h"

#include <algorithm>

namespace pylookahead {

namespace {

constexpr size_t kRecent = 8;

// Median seconds of the samples with `rows` rows; < 0 when there are fewer than 2.
template <typename Sample>
double median_seconds(const std::vector<Sample>& samples, int rows) {
    std::vector<double> s;
    for (const Sample& x : samples) {
        if (x.rows == rows) s.push_back(x.seconds);
    }
    if (s.size() < 2) return -1.0;
    std::sort(s.begin(), s.end());
    return s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
}

}  // namespace

void ThreadGovernor::reset(int full) {
    full_ = std::max(1, full);
    chosen_ = full_;
    interval_ = kMinInterval;
    until_probe_ = kFirstProbe;
    probe_left_ = 0;
    recent_.clear();
    probe_.clear();
}

int ThreadGovernor::next() {
    if (full_ == 1) return 1;
    if (probe_left_ == 0 && until_probe_ <= 0) {
        probe_left_ = kProbeSteps;
        probe_.clear();
    }
    return probe_left_ > 0 ? other() : chosen_;
}

void ThreadGovernor::record(int rows, double seconds) {
    if (full_ == 1) return;
    if (probe_left_ > 0) {
        probe_.push_back({rows, seconds});
        // A probe step that is not even faster than the choice's median ends the probe at once:
        // probing a count that lost its core costs a slow step each time, so make it one.
        const double a = median_seconds(recent_, rows);
        if (a > 0 && seconds >= a) {
            probe_left_ = 0;
            keep_choice();
            return;
        }
        if (--probe_left_ == 0) finish_probe();
        return;
    }
    recent_.push_back({rows, seconds});
    if (recent_.size() > kRecent) recent_.erase(recent_.begin());
    --until_probe_;
}

void ThreadGovernor::finish_probe() {
    // Compare on the row count the probe saw most (steps of other sizes cost differently).
    int rows = probe_.front().rows, best = 0;
    for (const Sample& p : probe_) {
        const int n = static_cast<int>(std::count_if(
            probe_.begin(), probe_.end(), [&](const Sample& q) { return q.rows == p.rows; }));
        if (n > best) best = n, rows = p.rows;
    }
    const double a = median_seconds(recent_, rows), b = median_seconds(probe_, rows);
    if (a > 0 && b > 0 && b < kSwitchRatio * a) {
        chosen_ = other();
        recent_ = probe_;  // the new choice's samples so far
        interval_ = kMinInterval;
        until_probe_ = interval_;
        probe_.clear();
    } else if (a > 0 && b > 0) {
        keep_choice();
    } else {  // inconclusive (too few steps of one size): try again after the same interval
        until_probe_ = interval_;
        probe_.clear();
    }
}

void ThreadGovernor::keep_choice() {
    interval_ = std::min(2 * interval_, kMaxInterval);
    until_probe_ = interval_;
    probe_.clear();
}

}  // namespace pylookahead
