// The registry of storages an async collective is still writing.
#include "runtime/pending.h"

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

namespace stepjit::runtime {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::pair<const Storage*, std::shared_ptr<PendingWork>>> entries;
  std::atomic<int> count{0};
};

Registry& Get() {
  static Registry* r = new Registry();  // outlives static destructors
  return *r;
}

// Removes and returns the work writing `storage` (null if none).
std::shared_ptr<PendingWork> Take(const Storage* storage) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto it = r.entries.begin(); it != r.entries.end(); ++it) {
    if (it->first == storage) {
      std::shared_ptr<PendingWork> w = std::move(it->second);
      r.entries.erase(it);
      r.count.store(static_cast<int>(r.entries.size()),
                    std::memory_order_relaxed);
      return w;
    }
  }
  return nullptr;
}

}  // namespace

void RegisterPending(const Storage* storage,
                     std::shared_ptr<PendingWork> work) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  r.entries.emplace_back(storage, std::move(work));
  r.count.store(static_cast<int>(r.entries.size()), std::memory_order_relaxed);
}

bool AnyPending() { return Get().count.load(std::memory_order_relaxed) > 0; }

void WaitPending(const Tensor& tensor) {
  if (!AnyPending() || !tensor.defined()) return;
  // Waiting outside the lock: the work's own completion never takes it.
  if (std::shared_ptr<PendingWork> w = Take(tensor.storage().get())) w->Wait();
}

void WaitPending(absl::Span<const Tensor> tensors) {
  if (!AnyPending()) return;
  for (const Tensor& t : tensors) WaitPending(t);
}

void WaitAllPending() {
  while (AnyPending()) {
    std::shared_ptr<PendingWork> w;
    {
      Registry& r = Get();
      std::lock_guard<std::mutex> lock(r.mu);
      if (r.entries.empty()) break;
      w = std::move(r.entries.front().second);
      r.entries.erase(r.entries.begin());
      r.count.store(static_cast<int>(r.entries.size()),
                    std::memory_order_relaxed);
    }
    w->Wait();
  }
}

}  // namespace stepjit::runtime
