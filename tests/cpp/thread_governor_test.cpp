// lookahead/thread_governor.h: probes the other thread count, switches only when it is faster on
// steps of the same size, and backs off while a choice holds.
#include "lookahead/thread_governor.h"

#include <gtest/gtest.h>

namespace pylookahead {
namespace {

// Runs `steps` steps of `rows` rows whose time is `cost(threads)`; returns the counts used.
template <typename Cost>
std::vector<int> run(ThreadGovernor& g, int steps, int rows, Cost cost) {
    std::vector<int> used;
    for (int i = 0; i < steps; ++i) {
        const int t = g.next();
        used.push_back(t);
        g.record(rows, cost(t));
    }
    return used;
}

TEST(ThreadGovernor, OneThreadIsNeverGoverned) {
    ThreadGovernor g(1);
    for (int t : run(g, 100, 1, [](int) { return 1.0; })) EXPECT_EQ(t, 1);
}

TEST(ThreadGovernor, QuietMachineKeepsAllThreadsAndProbesLessAndLess) {
    ThreadGovernor g(2);
    const std::vector<int> used = run(g, 2000, 1, [](int t) { return t == 2 ? 1.0 : 1.7; });
    int one = 0;
    for (int t : used) one += t == 1;
    EXPECT_EQ(g.chosen(), 2);
    EXPECT_EQ(g.interval(), ThreadGovernor::kMaxInterval);
    // Probes after 4, 32, 64, ... steps, each ended by its first (slower) step: a handful of
    // 1-thread steps in 2000.
    EXPECT_LE(one, 8);
    EXPECT_EQ(used.front(), 2);
}

TEST(ThreadGovernor, BusyCoreSwitchesToOneThreadAndBackWhenItClears) {
    ThreadGovernor g(2);
    bool busy = true;
    auto cost = [&](int t) { return t == 2 ? (busy ? 5.0 : 1.0) : 1.7; };
    run(g, ThreadGovernor::kFirstProbe + ThreadGovernor::kProbeSteps, 1, cost);
    EXPECT_EQ(g.chosen(), 1);  // switched at the first probe
    const std::vector<int> busy_steps = run(g, 500, 1, cost);
    EXPECT_EQ(g.chosen(), 1);  // probes of 2 threads stay slower while the core is busy
    int slow = 0;
    for (int t : busy_steps) slow += t == 2;
    EXPECT_LE(slow, 6);  // one step per probe, after 16, 32, 64, 128, 256 steps
    busy = false;
    run(g, 600, 1, cost);
    EXPECT_EQ(g.chosen(), 2);  // a later probe finds 2 threads faster again
}

TEST(ThreadGovernor, ComparesOnlyStepsOfTheSameSize) {
    ThreadGovernor g(2);
    // 2 threads on 1-row steps take 1.0; the probe happens to run 7-row steps on 1 thread that
    // take 1.5: no comparison is possible, so no switch.
    for (int i = 0; i < 200; ++i) {
        const bool probe = g.next() == 1;
        g.record(probe ? 7 : 1, probe ? 1.5 : 1.0);
    }
    EXPECT_EQ(g.chosen(), 2);
}

TEST(ThreadGovernor, ResetReturnsToTheFullCount) {
    ThreadGovernor g(2);
    run(g, 40, 1, [](int t) { return t == 2 ? 5.0 : 1.0; });
    ASSERT_EQ(g.chosen(), 1);
    g.reset(4);
    EXPECT_EQ(g.chosen(), 4);
    EXPECT_EQ(g.next(), 4);
}

}  // namespace
}  // namespace pylookahead
