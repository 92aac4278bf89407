// Thread pool: workers wait on a condition variable for one job at a time.
#include "runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace stepjit::runtime {
namespace {

thread_local bool t_in_pool_task = false;

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { Loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs task(i) for i in [0, tasks) on the workers and the caller.
  void Run(int tasks, const std::function<void(int)>& task) {
    std::unique_lock<std::mutex> run_lock(run_mu_);  // one job at a time
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      num_tasks_ = tasks;
      next_.store(0);
      pending_ = tasks;
      ++generation_;
    }
    cv_.notify_all();
    Drain();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void Drain() {
    t_in_pool_task = true;
    for (int i = next_.fetch_add(1); i < num_tasks_; i = next_.fetch_add(1)) {
      (*task_)(i);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
    t_in_pool_task = false;
  }
  void Loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || (generation_ != seen && task_); });
        if (stop_) return;
        seen = generation_;
      }
      Drain();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* task_ = nullptr;
  int num_tasks_ = 0;
  std::atomic<int> next_{0};
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool& GetPool() {
  static Pool* pool = new Pool(NumThreads());
  return *pool;
}

}  // namespace

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
  if (threads == 1 || n < 2 * grain || t_in_pool_task) {
    fn(0, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(threads, n / grain);
  const int64_t per = (n + chunks - 1) / chunks;
  GetPool().Run(static_cast<int>(chunks), [&](int i) {
    int64_t b = i * per, e = std::min(n, b + per);
    if (b < e) fn(b, e);
  });
}

}  // namespace stepjit::runtime
