// ParallelFor on the OpenMP runtime that oneDNN's GEMMs use: one pool of
// threads for the whole step. Two pools on the same cores (ours parked on a
// condition variable, oneDNN's spinning after each GEMM) competed for them.
#include "runtime/thread_pool.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <thread>

namespace stepjit::runtime {

int NumThreads() {
  static int n = [] {
    if (const char* env = std::getenv("STEPJIT_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v > 0) return v;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return n;
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
#pragma omp parallel num_threads(static_cast <int>(chunks))
  {
    // The team may be smaller than asked for (a thread limit): each thread
    // takes every team-size-th chunk, so every chunk runs.
    const int team = omp_get_num_threads();
    for (int64_t i = omp_get_thread_num(); i < chunks; i += team) {
      const int64_t b = i * per, e = std::min(n, b + per);
      try {
        if (b < e) fn(b, e);
      } catch (...) {
#pragma omp critical(stepjit_parallel_for_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace stepjit::runtime
