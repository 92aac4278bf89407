// Gradient formulas for every differentiable op, written in terms of ops.
#ifndef STEPJIT_RUNTIME_AUTOGRAD_GRAD_RULES_H_
#define STEPJIT_RUNTIME_AUTOGRAD_GRAD_RULES_H_

#include <vector>

#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/op.h"
#include "runtime/tensor.h"

namespace stepjit::autograd {

struct GradContext {
  ir::OpId op;
  const ir::Attrs& attrs;
  absl::Span<const Tensor> inputs;    // forward inputs (detached)
  const Tensor& output;               // forward output (detached)
  absl::Span<const bool> needs;       // which inputs need a gradient
};

// Gradients w.r.t. each input (undefined = none) from the output gradient.
// The results may still be broadcast-shaped or of a wider dtype; the caller
// sums them to the input's shape and casts to its dtype. Because the rules
// only call tensor ops, a traced backward is ordinary IR.
std::vector<Tensor> ComputeGrads(const GradContext& ctx, const Tensor& grad);

}  // namespace stepjit::autograd

#endif  // STEPJIT_RUNTIME_AUTOGRAD_GRAD_RULES_H_
