// How many CPU threads a decode step's parallel regions get: the decoding thread's own count or 1.
// std-only policy; the runtime applies it (TorchStepModel, omp_set_num_threads on that thread).
//
// Why: OpenMP workers that finish a region spin before they sleep. When another process holds one
// of the cores, a multi-threaded step waits on descheduled workers and runs several times slower
// than the same step on one thread (benchmarks/contention.py: SmolLM2 fp32 greedy at 2 threads
// fell from 42 to 5-9 tok/s beside one busy process, while 1 thread kept 24); sleeping at once
// instead (OMP_WAIT_POLICY=PASSIVE) cost 30% on a quiet machine. So the governor measures: every
// `interval` steps it runs up to 3 steps on the other count (one, when that step is not faster than
// the choice's median) and switches when their median is 15% faster on steps of the same row count.
// The interval doubles while a choice holds (16 to 512 steps), so a quiet machine pays about one
// 1-thread step per 512. Row results do not depend on the thread count (every
// kernel of a decode step splits its work by output columns or rows), so switching changes no bits.
#pragma once

#include <vector>

namespace pylookahead {

class ThreadGovernor {
  public:
    static constexpr int kProbeSteps = 3;    // steps per probe of the other count (at most)
    static constexpr int kFirstProbe = 4;    // steps before the first probe
    static constexpr int kMinInterval = 16;  // steps between probes after a switch
    static constexpr int kMaxInterval = 512;
    static constexpr double kSwitchRatio = 0.85;  // the other count must be 15% faster

    // `full`: the threads the decoding thread has (<= 1: the governor always answers 1).
    explicit ThreadGovernor(int full = 1) { reset(full); }

    // Starts over for a thread whose count is `full` (the choice goes back to `full`).
    void reset(int full);
    // Threads for the next decode step.
    int next();
    // The step run with next()'s count had `rows` rows and took `seconds`.
    void record(int rows, double seconds);

    int full() const { return full_; }
    int chosen() const { return chosen_; }
    int interval() const { return interval_; }

  private:
    struct Sample {
        int rows;
        double seconds;
    };
    int other() const { return chosen_ == full_ ? 1 : full_; }
    void finish_probe();
    void keep_choice();  // the probe lost: probe again after twice the interval

    int full_ = 1;
    int chosen_ = 1;
    int interval_ = kMinInterval;
    int until_probe_ = kFirstProbe;
    int probe_left_ = 0;          // > 0 while probing other()
    std::vector<Sample> recent_;  // the chosen count's last steps (at most 8)
    std::vector<Sample> probe_;
};

}  // namespace pylookahead
