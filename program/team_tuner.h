// TeamTuner: the thread count a compiled CPU step replays on, chosen by
// timing the replays themselves, so that a step on a shared machine stops
// waiting for threads another process holds.
//
// With every core busy with our threads, a GEMM or a fused loop split into
// equal parts finishes when its slowest part does: when another process
// takes a core, the thread sharing it gets part of that core, and every
// parallel phase waits for it (and for a whole scheduler time slice whenever
// it is descheduled mid-phase). On 2 cores beside one busy process the MLP
// step took 2.35x its unloaded time on 2 threads, 1.7x on 1 thread.
//
// The tuner keeps the last replay times of each candidate team (all cores,
// half of them, one) and replays on the one with the lowest median. Every
// so often it probes another candidate for a few replays; a probe that loses
// doubles the wait before the next (16 replays up to 512), so a machine whose
// load does not change pays a probe about once in 500 replays. A replay on
// the chosen team that takes 1.5x the best median seen for it (the machine
// got busier) schedules a probe right away. A candidate's first replay (where
// the GEMM library prepares its kernels for that team) is not counted.
//
// Results do not depend on the team: ParallelFor keeps its chunks on any
// team (runtime/thread_pool.h); the GEMM library's partition of a product
// can change with its thread count, which for products split over the K
// dimension can change the last bits. STEPJIT_ADAPTIVE_THREADS=0 keeps every
// replay on all threads.
#ifndef STEPJIT_PROGRAM_TEAM_TUNER_H_
#define STEPJIT_PROGRAM_TEAM_TUNER_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace stepjit::runtime {

class TeamTuner {
 public:
  // Candidates from `threads`: threads, (threads + 1) / 2 and 1, distinct.
  explicit TeamTuner(int threads);

  // The team for the next replay.
  int Next();
  // The replay that ran on `team` took `ms`.
  void Record(int team, double ms);

  // What the tuner chose and how often it probed (for explain() and tests).
  int chosen() const;
  int64_t probes() const;
  const std::vector<int>& candidates() const { return candidates_; }

  static constexpr int kSamples = 5;      // replay times kept per candidate
  static constexpr int kProbeRuns = 3;    // replays per probe
  static constexpr int kFirstProbe = 16;  // replays before the first probe
  static constexpr int kMaxProbeWait = 512;

 private:
  struct Candidate {
    int team = 0;
    bool warmed = false;  // its first replay ran (and was not counted)
    std::deque<double> ms = {};
    double best_median = 0;  // the lowest median seen
  };
  double Median(const Candidate& c) const;
  void FinishProbe();

  mutable std::mutex mu_;
  std::vector<int> candidates_;
  std::vector<Candidate> c_;
  size_t chosen_ = 0;
  size_t probing_ = 0;  // candidate under probe while probe_left_ > 0
  int probe_left_ = 0;
  size_t next_probe_ = 1;  // round robin over the others
  int64_t until_probe_ = kFirstProbe;
  int64_t probe_wait_ = kFirstProbe;
  int64_t probes_ = 0;
};

// Whether compiled CPU replays tune their team: STEPJIT_ADAPTIVE_THREADS
// (1/on, the default, or 0/off); any other value is an error naming the
// variable and the accepted values.
bool AdaptiveThreads();

}  // namespace stepjit::runtime

#endif  // STEPJIT_PROGRAM_TEAM_TUNER_H_
