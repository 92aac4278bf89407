// ParallelFor on the OpenMP runtime that oneDNN's GEMMs use: one pool of
// threads for the whole step. Two pools on the same cores (ours parked on a
// condition variable, oneDNN's spinning after each GEMM) competed for them.
#include "runtime/thread_pool.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace stepjit::runtime {

int ParseNumThreads(const char* text) {
  int64_t v = 0;
  if (text == nullptr || *text == '\0') {
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  if (!absl::SimpleAtoi(text, &v) || v < 1 || v > kMaxNumThreads) {
    throw Error(absl::StrCat(
        "STEPJIT_NUM_THREADS: expected a whole number of threads from 1 to ",
        kMaxNumThreads, ", got '", text, "'"));
  }
  return static_cast<int>(v);
}

int NumThreads() {
  static const int n = ParseNumThreads(std::getenv("STEPJIT_NUM_THREADS"));
  return n;
}

namespace {
thread_local int t_team = 0;  // 0: NumThreads()
}  // namespace

int TeamSize() { return t_team > 0 ? t_team : NumThreads(); }

TeamScope::TeamScope(int team)
    : saved_team_(t_team), saved_omp_(omp_get_max_threads()) {
  t_team = std::clamp(team, 1, NumThreads());
  omp_set_num_threads(t_team);
}

TeamScope::~TeamScope() {
  t_team = saved_team_;
  omp_set_num_threads(saved_omp_);
}

void ParallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = NumThreads();
  if (threads == 1 || n < 2 * grain || omp_in_parallel()) {
    fn(0, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(threads, n / grain);
  const int64_t per = (n + chunks - 1) / chunks;
  std::exception_ptr error;
  // Each thread takes every team-size-th chunk (the team may also be
  // smaller than asked for: a thread limit), so every chunk runs.
  auto run_chunks = [&](int64_t first, int64_t step) {
    for (int64_t i = first; i < chunks; i += step) {
      const int64_t b = i * per, e = std::min(n, b + per);
      try {
        if (b < e) fn(b, e);
      } catch (...) {
#pragma omp critical(stepjit_parallel_for_error)
        if (!error) error = std::current_exception();
      }
    }
  };
  const int team = static_cast<int>(std::min<int64_t>(chunks, TeamSize()));
  if (team == 1) {
    run_chunks(0, 1);
  } else {
#pragma omp parallel num_threads(team)
    run_chunks(omp_get_thread_num(), omp_get_num_threads());
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace stepjit::runtime
