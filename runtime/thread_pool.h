// ParallelFor for splitting kernels across cores, on the OpenMP threads the
// GEMM library (oneDNN) runs on.
#ifndef STEPJIT_RUNTIME_THREAD_POOL_H_
#define STEPJIT_RUNTIME_THREAD_POOL_H_

#include <cstdint>
#include <functional>

namespace stepjit::runtime {

// Threads used by kernels: STEPJIT_NUM_THREADS, else the number of cores.
// A value that is not a whole number in the range config/env.def gives
// (1 to 1024) is an Error naming the variable (thrown by the first call,
// and every call after it).
int NumThreads();
// STEPJIT_NUM_THREADS's rule for `text` (null or empty: the cores).
int ParseNumThreads(const char* text);

// The threads parallel work may use on the calling thread now: NumThreads(),
// or fewer inside a TeamScope.
int TeamSize();

// Narrows the team of the calling thread to `team` threads (clamped to
// 1..NumThreads()) until destroyed: ParallelFor runs its chunks on that many
// threads, and the GEMM library (oneDNN on OpenMP, whose thread count this
// sets for the calling thread) runs its products on that many. ParallelFor's
// chunk boundaries do not change with the team, so a loop computes the same
// bits on any team. Scopes nest.
class TeamScope {
 public:
  explicit TeamScope(int team);
  ~TeamScope();
  TeamScope(const TeamScope&) = delete;
  TeamScope& operator=(const TeamScope&) = delete;

 private:
  int saved_team_;
  int saved_omp_;
};

// Calls fn(begin, end) over disjoint chunks covering [0, n): min(NumThreads(),
// n / grain) chunks, whatever the team, run TeamSize() at a time. Runs
// inline when n < 2 * grain or when called from inside a parallel region (no
// nested fan-out). An exception thrown by fn is rethrown to the caller after
// every chunk has finished.
void ParallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn);

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_THREAD_POOL_H_
