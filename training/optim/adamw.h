// optim::AdamW: Adam with decoupled weight decay, as torch.optim.AdamW.
//
// Matches torch.optim.AdamW (amsgrad=False) update for update.
#ifndef STEPJIT_TRAINING_OPTIM_ADAMW_H_
#define STEPJIT_TRAINING_OPTIM_ADAMW_H_

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"
#include "training/optim/optimizer.h"

namespace stepjit::optim {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// Per-parameter moments, zeros-like the parameter, created on the first step
// that sees its grad (undefined before).
struct AdamWState {
  Tensor exp_avg;     // m
  Tensor exp_avg_sq;  // v
};

class AdamW : public Optimizer {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  // A braced list of parameters ({w, b}, or {}) picks this one.
  AdamW(std::initializer_list<Tensor> params, AdamWOptions options = {})
      : AdamW(std::vector<Tensor>(params), options) {}
  // Groups with their own lr or weight_decay (the others take `options`').
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});

  // t += 1; p *= 1 - lr * wd; m = lerp(m, g, 1 - beta1);
  // v = beta2 * v + (1 - beta2) * g^2;
  // p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
  // t is the optimizer's step count, shared by all parameters; it equals
  // PyTorch's per-parameter count unless some grads are skipped on some steps.
  void step() override;
  std::vector<Tensor> state_tensors() const override;

  const AdamWOptions& options() const { return options_; }
  const AdamWState& state(size_t index) const { return state_.at(index); }

 protected:
  Slots SlotsOf(size_t index) const override;
  std::vector<std::string> SlotNames() const override {
    return {"exp_avg", "exp_avg_sq"};
  }
  void CreateSlots(size_t index) override;
  bool StepInState() const override { return true; }
  std::vector<std::pair<std::string, std::string>> HyperParameters(
      size_t group) const override;

 private:
  AdamWOptions options_;
  std::vector<AdamWState> state_;
  // The betas as 0-d f64 tensors, so beta^t is pow(tensor, step tensor).
  Tensor beta1_;
  Tensor beta2_;
};

}  // namespace stepjit::optim

#endif  // STEPJIT_TRAINING_OPTIM_ADAMW_H_
