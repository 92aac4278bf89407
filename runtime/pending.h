// Results still being written off the calling thread (an async collective's
// output). The storage being written holds the work writing it (no registry
// keyed by address): whoever reads the storage first waits for it.
//
// Dispatch and the replay loop wait for every operand's work before an op
// reads it, so an async result can be used like any tensor; that costs one
// pointer test per operand while nothing is pending. A collective's caller
// may also wait itself (dist::Work::wait, as torch.distributed's async
// handles).
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

// `storage` is written by `work` until it finishes (it replaces any work
// already marked there, which must have been waited for).
void SetPending(Storage& storage, std::shared_ptr<PendingWork> work);
// Waits for the work writing `tensor`'s storage, if any, and clears the
// mark (a later reader does not wait again).
void WaitPending(const Tensor& tensor);
void WaitPending(absl::Span<const Tensor> tensors);

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_PENDING_H_
