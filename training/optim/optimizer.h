// optim::Optimizer: the parameter list, zero_grad, and lr/step as 0-d tensors.
//
// The learning rate and the step count are 0-d f32 tensors rather than
// doubles so that a traced step reads them as state: changing the lr between
// steps updates the tensor in place (same identity) instead of baking a new
// constant into a compiled graph. step() must therefore never read a value
// back to the host.
#ifndef STEPJIT_TRAINING_OPTIM_OPTIMIZER_H_
#define STEPJIT_TRAINING_OPTIM_OPTIMIZER_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "runtime/dispatch.h"
#include "runtime/tensor.h"
#include "training/state_dict.h"

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

  // PyTorch's optimizer.state_dict() as safetensors entries (the scheme is
  // in docs/checkpoints.md): tensors "state.<i>.<slot>", i the parameter's
  // index in parameters() and the slots PyTorch's (AdamW: step, exp_avg,
  // exp_avg_sq; SGD: momentum_buffer), for the parameters that have state;
  // metadata "type" ("AdamW") and "param_groups", a JSON list of PyTorch's
  // param_groups ("lr", the hyperparameters, "params": the indices). The
  // tensors share storage with the optimizer's.
  StateDict state_dict() const;
  // Loads a state_dict(): learning rates and state are copied in place
  // (created first for parameters without state yet), so compiled steps stay
  // valid. Every other hyperparameter must equal this optimizer's (it is
  // part of compiled steps: construct the optimizer with the saved options).
  // On any error nothing has changed.
  absl::Status load_state_dict(const StateDict& state);
  // The checking half of load_state_dict (LoadPlan::Apply loads).
  absl::StatusOr<LoadPlan> PlanLoad(const StateDict& state);

 protected:
  // Parameter `index`'s state tensors by PyTorch's names (undefined before
  // the first step that updates it), in the order of SlotNames().
  // (Pointers to the optimizer's own tensors, valid until its state next
  // changes, held inline: the recording check asks for them on every call.)
  using Slots = absl::InlinedVector<const Tensor*, 2>;
  virtual Slots SlotsOf(size_t index) const { return {}; }
  virtual std::vector<std::string> SlotNames() const { return {}; }
  // Creates parameter `index`'s state (zeros), if it has none.
  virtual void CreateSlots(size_t index) {}
  // Whether PyTorch keeps a per-parameter "step" tensor (AdamW does; it is
  // stepjit's one step count, so a file's steps must all be equal).
  virtual bool StepInState() const { return false; }
  // Group `group`'s hyperparameters besides lr and weight_decay, as JSON
  // text by PyTorch's names ({"betas", "[0.9,0.999]"}).
  virtual std::vector<std::pair<std::string, std::string>> HyperParameters(
      size_t group) const = 0;

  // `name` prefixes error messages ("SGD", "AdamW"); `weight_decay` is the
  // default of groups that do not set theirs.
  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay,
            const char* name);

  // Advances the step count by one, on device.
  void IncrementStep();

  // Every parameter's .grad (undefined where it has none), read once.
  std::vector<Tensor> Grads() const;
  // For a step() that a recording tracer may stand in for: begins
  // `routine` (runtime::RecordedRoutine) with the numbers that decide its
  // ops besides its tensors (the group structure, each group's weight
  // decay, which parameters have a grad and which slots exist, then
  // `options`, the subclass's own), and the tensors it reads or writes that
  // exist before it runs: the step count, `shared` (tensors the update reads
  // for all parameters), each group's lr when `all_lrs` or when one of its
  // parameters has a grad, then per parameter with a grad the parameter,
  // its grad and its existing slots.
  void BeginStepRoutine(std::optional<runtime::RecordedRoutine>& routine,
                        const std::vector<Tensor>& grads,
                        std::initializer_list<double> options,
                        std::initializer_list<const Tensor*> shared,
                        bool all_lrs) const;

  std::vector<Tensor> params_;

 private:
  // The two halves of PlanLoad: "param_groups" (lr loaded, the rest
  // checked) and the "state.<i>.<slot>" tensors.
  absl::Status PlanParamGroups(const StateDict& state, LoadPlan& plan);
  absl::Status PlanParameterState(const StateDict& state, LoadPlan& plan);

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

#endif  // STEPJIT_TRAINING_OPTIM_OPTIMIZER_H_
