// optim::SGD: stochastic gradient descent with momentum, dampening, Nesterov
// and L2 weight decay, matching torch.optim.SGD update for update.
#ifndef STEPJIT_TRAINING_OPTIM_SGD_H_
#define STEPJIT_TRAINING_OPTIM_SGD_H_

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"
#include "training/optim/optimizer.h"

namespace stepjit::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// Per-parameter state; momentum_buffer is undefined until the first step
// with a grad (and always without momentum).
struct SGDState {
  Tensor momentum_buffer;
};

class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});
  // A braced list of parameters ({w, b}, or {}) picks this one.
  SGD(std::initializer_list<Tensor> params, SGDOptions options = {})
      : SGD(std::vector<Tensor>(params), options) {}
  // Groups with their own lr or weight_decay (the others take `options`').
  SGD(std::vector<ParamGroup> groups, SGDOptions options = {});

  // g += wd * p; buf = g (first step) or momentum * buf + (1 - dampening) * g;
  // g = g + momentum * buf (Nesterov) or buf; p -= lr * g.
  void step() override;
  std::vector<Tensor> state_tensors() const override;

  const SGDOptions& options() const { return options_; }
  const SGDState& state(size_t index) const { return state_.at(index); }

 protected:
  // Without momentum there is no state (PyTorch's momentum_buffer is None).
  Slots SlotsOf(size_t index) const override;
  std::vector<std::string> SlotNames() const override;
  void CreateSlots(size_t index) override;
  std::vector<std::pair<std::string, std::string>> HyperParameters(
      size_t group) const override;

 private:
  SGDOptions options_;
  std::vector<SGDState> state_;
};

}  // namespace stepjit::optim

#endif  // STEPJIT_TRAINING_OPTIM_SGD_H_
