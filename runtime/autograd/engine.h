// Autograd graph nodes, op recording and the backward engine.
#ifndef STEPJIT_RUNTIME_AUTOGRAD_ENGINE_H_
#define STEPJIT_RUNTIME_AUTOGRAD_ENGINE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/op.h"
#include "runtime/tensor.h"

namespace stepjit::autograd {

// A node of the backward graph: turns the gradient of its one output into
// gradients for its inputs. next_[i] is null for inputs without gradients.
class Node {
 public:
  virtual ~Node() = default;
  virtual std::vector<Tensor> Apply(Tensor grad_output) = 0;
  virtual std::string name() const = 0;
  const std::vector<std::shared_ptr<Node>>& next() const { return next_; }

 protected:
  std::vector<std::shared_ptr<Node>> next_;
};

// Records `op` (already executed) so that backward can differentiate it.
// Called by dispatch when grad mode is on and an input requires grad.
void RecordOp(ir::OpId op, absl::Span<const Tensor> inputs, const ir::Attrs& attrs,
              const Tensor& output);

// Runs backward from `root` (a scalar unless `grad` is given), accumulating
// into the .grad of leaves that require grad.
void Backward(const Tensor& root, const Tensor& grad);

}  // namespace stepjit::autograd

#endif  // STEPJIT_RUNTIME_AUTOGRAD_ENGINE_H_
