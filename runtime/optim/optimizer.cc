// optim::Optimizer: parameter validation, zero_grad and the lr/step tensors.
#include "runtime/optim/optimizer.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "ir/status.h"
#include "runtime/ops.h"

namespace stepjit::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr, const char* name)
    : params_(std::move(params)), name_(name) {
  SJ_REQUIRE(!params_.empty(), name_, ": got an empty parameter list");
  absl::flat_hash_set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    SJ_REQUIRE(p.defined(), name_, ": parameter ", i, " is undefined");
    SJ_REQUIRE(p.is_leaf(), name_, ": can't optimize parameter ", i,
               ", a non-leaf tensor");
    SJ_REQUIRE(ir::IsFloating(p.dtype()), name_, ": parameter ", i,
               " has non-floating dtype ",
               std::string(ir::DTypeName(p.dtype())));
    // A duplicate would be updated twice per step.
    SJ_REQUIRE(seen.insert(p.impl()).second, name_, ": parameter ", i,
               " appears more than once in the parameter list");
  }
  SJ_REQUIRE(lr >= 0.0, name_, ": invalid learning rate: ", lr);
  // Kept next to the parameters so that step() mixes no devices.
  const TensorOptions options{.dtype = DType::kF32,
                              .device = params_.front().device()};
  lr_ = scalar_tensor(lr, options);
  step_ = scalar_tensor(0.0, options);
  MarkOwnedState(lr_);
  MarkOwnedState(step_);
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (Tensor grad = p.grad(); grad.defined()) {
      grad.zero_();
    }
  }
}

double Optimizer::lr() const { return lr_.item(); }

void Optimizer::set_lr(double lr) {
  SJ_REQUIRE(lr >= 0.0, name_, ": invalid learning rate: ", lr);
  lr_.fill_(lr);
}

void Optimizer::IncrementStep() { step_.add_(wrap_scalar(1.0, step_)); }

}  // namespace stepjit::optim
