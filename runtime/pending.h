// Results still being written off the calling thread (an async collective's
// output): whoever reads such a storage first waits for it.
//
// Dispatch waits for its operands, the replay loop for every node's inputs
// and for all pending work at the end of a run, so an async result can be
// used like any tensor; the registry costs one relaxed atomic load per op
// while nothing is pending.
#ifndef STEPJIT_RUNTIME_PENDING_H_
#define STEPJIT_RUNTIME_PENDING_H_

#include <memory>

#include "absl/types/span.h"
#include "runtime/tensor.h"

namespace stepjit::runtime {

class PendingWork {
 public:
  virtual ~PendingWork() = default;
  // Blocks until the work is done; throws stepjit::Error if it failed or
  // timed out.
  virtual void Wait() = 0;
};

// `storage` is written by `work` until it finishes.
void RegisterPending(const Storage* storage, std::shared_ptr<PendingWork> work);
// Waits for the work writing any of `tensors`' storages.
void WaitPending(absl::Span<const Tensor> tensors);
void WaitPending(const Tensor& tensor);
// Waits for every registered work (in registration order).
void WaitAllPending();
bool AnyPending();

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_PENDING_H_
