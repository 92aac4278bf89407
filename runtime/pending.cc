// Results still being written off the calling thread: the work a storage
// holds.
#include "runtime/pending.h"

#include <utility>

namespace stepjit::runtime {

void SetPending(Storage& storage, std::shared_ptr<PendingWork> work) {
  storage.set_pending(std::move(work));
}

void WaitPending(const Tensor& tensor) {
  if (!tensor.defined() || !tensor.storage()->has_pending()) return;
  // Cleared before waiting: a failed wait throws once, and the storage no
  // longer keeps the work (and what it holds) alive.
  const std::shared_ptr<PendingWork> work = tensor.storage()->TakePending();
  work->Wait();
}

void WaitPending(absl::Span<const Tensor> tensors) {
  for (const Tensor& t : tensors) WaitPending(t);
}

}  // namespace stepjit::runtime
