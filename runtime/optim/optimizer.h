// optim::Optimizer: the parameter list, zero_grad, and lr/step as 0-d tensors.
//
// The learning rate and the step count are 0-d f32 tensors rather than
// doubles so that a traced step reads them as state: changing the lr between
// steps updates the tensor in place (same identity) instead of baking a new
// constant into a compiled graph. step() must therefore never read a value
// back to the host.
#ifndef STEPJIT_RUNTIME_OPTIM_OPTIMIZER_H_
#define STEPJIT_RUNTIME_OPTIM_OPTIMIZER_H_

#include <vector>

#include "runtime/tensor.h"

namespace stepjit::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter whose grad is defined.
  virtual void step() = 0;
  // set_to_none drops the grads (the next backward allocates fresh ones);
  // otherwise they are zeroed in place.
  void zero_grad(bool set_to_none = true);

  // Handles sharing the impls passed in (same identity as the module's).
  const std::vector<Tensor>& parameters() const { return params_; }

  const Tensor& lr_tensor() const { return lr_; }
  double lr() const;  // a host read: not for use inside step()
  void set_lr(double lr);
  // How many times step() has run, as a 0-d f32 tensor.
  const Tensor& step_count() const { return step_; }
  // Every tensor step() updates in place besides the parameters (the step
  // count, moments, momentum buffers), for callers that must undo a step
  // (amp::GradScaler). Lazily created state appears once it exists.
  virtual std::vector<Tensor> state_tensors() const { return {step_}; }

 protected:
  // `name` prefixes error messages ("SGD", "AdamW").
  Optimizer(std::vector<Tensor> params, double lr, const char* name);

  // Advances the step count by one, on device.
  void IncrementStep();

  std::vector<Tensor> params_;

 private:
  const char* name_;
  Tensor lr_;
  Tensor step_;
};

}  // namespace stepjit::optim

#endif  // STEPJIT_RUNTIME_OPTIM_OPTIMIZER_H_
