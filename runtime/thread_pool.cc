// ParallelFor on the OpenMP runtime that oneDNN's GEMMs use: one pool of
// threads for the whole step. Two pools on the same cores (ours parked on a
// condition variable, oneDNN's spinning after each GEMM) competed for them.
#include "runtime/thread_pool.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "config/env.h"
#include "ir/status.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace stepjit::runtime {
namespace {

// libgomp is not built for ThreadSanitizer, which therefore cannot see the
// synchronization of a parallel region's fork and join or of a critical
// section. In a TSan build these mark it (each address names one
// synchronization); elsewhere they are nothing.
#if defined(__SANITIZE_THREAD__)
char g_fork, g_join;
std::mutex g_region_mu;
const std::function<void(int64_t, int64_t)>* g_region = nullptr;
#endif
inline void SyncRelease(void* addr) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(addr);
#endif
}
inline void SyncAcquire(void* addr) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(addr);
#endif
}

}  // namespace

int ParseNumThreads(const char* text) {
  if (text == nullptr || *text == '\0') {
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  return static_cast<int>(
      ValueOrThrow(config::ParseInt(config::Env::kNumThreads, text)));
}

int NumThreads() {
  static const int n = [] {
    const std::optional<std::string> v = config::Get(config::Env::kNumThreads);
    return ParseNumThreads(v ? v->c_str() : nullptr);
  }();
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
        {
          SyncAcquire(&error);
          if (!error) error = std::current_exception();
          SyncRelease(&error);
        }
      }
    }
  };
  const int team = static_cast<int>(std::min<int64_t>(chunks, TeamSize()));
  if (team == 1) {
    run_chunks(0, 1);
  } else {
#if defined(__SANITIZE_THREAD__)
    // The compiler stores a region's shared variables for its threads after
    // any call made before the region, so a release there could not cover
    // them. Here the region reads only globals: the chunks it runs come
    // through g_region, written (under a lock: one region at a time) before
    // the fork's release. The chunks themselves are run as below.
    std::lock_guard<std::mutex> lock(g_region_mu);
    const std::function<void(int64_t, int64_t)> region = run_chunks;
    g_region = &region;
    SyncRelease(&g_fork);
#pragma omp parallel num_threads(team)
    {
      SyncAcquire(&g_fork);
      (*g_region)(omp_get_thread_num(), omp_get_num_threads());
      SyncRelease(&g_join);
    }
    SyncAcquire(&g_join);
#else
#pragma omp parallel num_threads(team)
    run_chunks(omp_get_thread_num(), omp_get_num_threads());
#endif
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace stepjit::runtime
