// optim::Optimizer: the parameter list, zero_grad, and lr/step as 0-d tensors.
//
// The learning rate and the step count are 0-d f32 tensors rather than
// doubles so that a traced step reads them as state: changing the lr between
// steps updates the tensor in place (same identity) instead of baking a new
// constant into a compiled graph. step() must therefore never read a value
// back to the host.
#ifndef STEPJIT_RUNTIME_OPTIM_OPTIMIZER_H_
#define STEPJIT_RUNTIME_OPTIM_OPTIMIZER_H_

#include <optional>
#include <vector>

#include "runtime/tensor.h"

namespace stepjit::nn {
class Module;
}

namespace stepjit::optim {

// Parameters that share hyperparameters (PyTorch's param_groups): a group
// without lr or weight_decay takes the optimizer's options.
struct ParamGroup {
  std::vector<Tensor> params = {};
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
};

// The usual split for transformers: matrices and embeddings (dim >= 2)
// decay with `weight_decay`, biases and norm weights (dim < 2) do not.
std::vector<ParamGroup> DecayGroups(const nn::Module& module,
                                    double weight_decay);

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

  // The groups in the order given (one group for a plain parameter list).
  size_t num_groups() const { return groups_.size(); }
  // Group `g`'s learning rate as a 0-d f32 tensor, updated in place.
  const Tensor& lr_tensor(size_t group = 0) const {
    return groups_.at(group).lr;
  }
  double lr(size_t group = 0) const;  // a host read: not for use inside step()
  // Sets every group's learning rate, or one group's.
  void set_lr(double lr);
  void set_lr(size_t group, double lr);
  double weight_decay(size_t group) const {
    return groups_.at(group).weight_decay;
  }
  // The group of parameter `index` (of parameters()).
  size_t group_of(size_t index) const { return group_of_.at(index); }
  // How many times step() has run, as a 0-d f32 tensor.
  const Tensor& step_count() const { return step_; }
  // Every tensor step() updates in place besides the parameters (the step
  // count, moments, momentum buffers), for callers that must undo a step
  // (amp::GradScaler). Lazily created state appears once it exists.
  virtual std::vector<Tensor> state_tensors() const { return {step_}; }

 protected:
  // `name` prefixes error messages ("SGD", "AdamW"); `weight_decay` is the
  // default of groups that do not set theirs.
  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay,
            const char* name);

  // Advances the step count by one, on device.
  void IncrementStep();

  std::vector<Tensor> params_;

 private:
  struct Group {
    Tensor lr;
    double weight_decay;
  };
  const char* name_;
  std::vector<Group> groups_;
  std::vector<size_t> group_of_;
  Tensor step_;
};

}  // namespace stepjit::optim

#endif  // STEPJIT_RUNTIME_OPTIM_OPTIMIZER_H_
