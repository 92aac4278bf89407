// Autograd graph nodes, op recording and the backward engine.
#ifndef STEPJIT_RUNTIME_AUTOGRAD_ENGINE_H_
#define STEPJIT_RUNTIME_AUTOGRAD_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/op.h"
#include "runtime/routine_tensors.h"
#include "runtime/tensor.h"

namespace stepjit::autograd {

class Node;

// The nodes a library routine with a result (a module's forward, recorded
// as one routine by a recording tracer: runtime::RecordedRoutine) adds to
// the backward graph. `place` identifies the routine in its record and
// `edges` are the gradient edges of the routine's `tensors` when it began, so
// that the group is described the same way (DescribeBackward) whether its
// ops ran one by one or a recording call stood in for them. Only a `closed`
// group is described as one: every edge out of its nodes leads to one of
// `edges` or to another of its nodes.
struct RoutineGroup {
  uint64_t place = 0;
  absl::InlinedVector<std::shared_ptr<Node>, 8> edges;
  // The routine's tensors (its backward reads them).
  std::vector<Tensor> tensors;
  std::vector<std::weak_ptr<Node>> members;
  bool closed = false;
};

// A node of the backward graph: turns the gradient of its one output into
// gradients for its inputs. next_[i] is null for inputs without gradients.
class Node {
 public:
  virtual ~Node() = default;
  virtual std::vector<Tensor> Apply(Tensor grad_output) = 0;
  virtual std::string name() const = 0;
  // For DescribeBackward: appends what decides the ops Apply dispatches
  // (besides what its gradient edges lead to) to `key` and the tensors it
  // reads to `tensors`; false when no key covers it (its code is the
  // user's).
  virtual bool Describe(std::vector<uint64_t>& key,
                        runtime::RoutineTensors& tensors) const {
    return false;
  }
  // Inline for up to 3 inputs (almost every op): recording a node costs
  // no allocation beyond the node itself.
  using Edges = absl::InlinedVector<std::shared_ptr<Node>, 3>;
  const Edges& next() const { return next_; }
  // For rewiring the graph before a backward runs (RedoRoutines).
  std::shared_ptr<Node>& mutable_edge(size_t i) { return next_[i]; }
  // The routine whose ops recorded this node (RoutineScope), or null.
  const RoutineGroup* group() const { return group_.get(); }

 protected:
  Edges next_;
  std::shared_ptr<RoutineGroup> group_;
};

// The node gradients flow to from `t`: its grad_fn, its grad accumulator (a
// leaf that requires grad; made on first use), or null.
std::shared_ptr<Node> GradientEdge(const Tensor& t);

// While alive on this thread, the nodes RecordOp makes belong to `group`,
// which it creates with `place` and the gradient edges of `tensors`. Only
// the outermost scope on a thread makes a group (a nested one does
// nothing). Close() checks that the group is closed (see RoutineGroup) and
// marks it so.
class RoutineScope {
 public:
  RoutineScope(uint64_t place, std::vector<Tensor> tensors);
  ~RoutineScope();
  RoutineScope(const RoutineScope&) = delete;
  RoutineScope& operator=(const RoutineScope&) = delete;
  void Close();
  // Whether a scope is alive on this thread.
  static bool InScope();

 private:
  std::shared_ptr<RoutineGroup> group_;
};

// For a routine a recording call stood in for: gives `result` (shape-only,
// without autograd) one node standing for the routine's nodes, in a closed
// group with `place` and the gradient edges of `tensors`. The node has none
// of the routine's saved tensors: a backward that runs op by op first has
// the observer dispatch the routine's ops again (DispatchObserver::
// RedoRoutine) and runs through the nodes they record; without that,
// applying the node throws, which makes the recording call inconclusive (it
// then runs as written).
void SetRoutineResult(const Tensor& result, uint64_t place,
                      std::vector<Tensor> tensors);

// Records `op` (already executed) so that backward can differentiate it.
// Called by dispatch when grad mode is on and an input requires grad.
void RecordOp(ir::OpId op, absl::Span<const Tensor> inputs, const ir::Attrs& attrs,
              const Tensor& output);

// Runs backward from `root` (a scalar unless `grad` is given), accumulating
// into the .grad of leaves that require grad.
void Backward(const Tensor& root, const Tensor& grad);

// Calls `hook(leaf)` each time a backward has accumulated a gradient into the
// .grad of `leaf` (a leaf that requires grad), right after the update, with
// grad mode off as in the rest of backward (torch's
// register_post_accumulate_grad_hook). Hooks live as long as the leaf and run
// in registration order; they may dispatch ops (in a traced step those ops
// are recorded). Returns a handle for RemovePostAccumulateGradHook.
int AddPostAccumulateGradHook(const Tensor& leaf,
                              std::function<void(const Tensor& leaf)> hook);
// Removes the hook `handle` from `leaf`; false when it has none by that handle.
bool RemovePostAccumulateGradHook(const Tensor& leaf, int handle);

// Runs `callback` once the running backward has processed its whole graph,
// after every earlier queued callback and still inside Backward (grad mode
// off); callbacks may queue further callbacks and dispatch ops (PyTorch's
// Variable._execution_engine.queue_callback). Throws stepjit::Error outside
// a backward. If the backward throws, its queued callbacks are dropped.
void QueueCallback(std::function<void()> callback);
// Identifies the running backward on this thread (a new number for each
// Backward call, nested ones included); 0 outside any. Lets hooks tell one
// backward from the next without relying on a callback having run.
uint64_t CurrentBackwardId();

}  // namespace stepjit::autograd

#endif  // STEPJIT_RUNTIME_AUTOGRAD_ENGINE_H_
