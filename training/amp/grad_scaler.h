// GradScaler: dynamic loss scaling with PyTorch's semantics and defaults,
// entirely on device (no host synchronization), so a step using it traces
// and compiles like any other.
//
//   amp::GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                       // optional: clip in between
//   nn::utils::clip_grad_norm_(params, 1.0);
//   scaler.step(opt);                           // skipped when a grad is inf/NaN
//   scaler.update();
//
// The scale, the growth tracker and each optimizer's found-inf flag are 0-d
// f32 tensors. found_inf is a reduction over the grads (sum(g * 0) is NaN
// exactly when g holds an inf or NaN); step() runs the optimizer and then
// keeps or restores every parameter and optimizer state tensor with
// where(found_inf, before, after); update() adjusts the scale with where().
#ifndef STEPJIT_TRAINING_AMP_GRAD_SCALER_H_
#define STEPJIT_TRAINING_AMP_GRAD_SCALER_H_

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "runtime/tensor.h"
#include "training/optim/optimizer.h"
#include "training/state_dict.h"

namespace stepjit::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
  // Where the scale and the found-inf flags live: the gradients' device.
  Device device = Device::cpu();
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (the loss itself when disabled).
  Tensor scale(const Tensor& loss);
  // Divides opt's grads by the scale in place and records whether any is
  // inf/NaN. At most once per optimizer between update() calls.
  void unscale_(optim::Optimizer& opt);
  // Unscales if not done yet, then runs opt.step() unless a grad of this
  // optimizer was inf/NaN (then parameters and optimizer state are left
  // exactly as they were).
  void step(optim::Optimizer& opt);
  // Backs the scale off after an inf/NaN step; grows it after
  // growth_interval clean steps in a row. Resets the per-step state.
  void update();

  // Host reads (they synchronize): for logging, not inside a traced step.
  double get_scale() const;
  int64_t growth_tracker() const;
  // The device tensors (0-d f32), e.g. to bind as compiled-step state.
  const Tensor& scale_tensor() const { return scale_; }
  const Tensor& growth_tracker_tensor() const { return growth_tracker_; }
  // 1 when the last update() saw an inf/NaN grad (that step was skipped),
  // and the number of skipped steps so far: 0-d f32 device tensors.
  const Tensor& last_found_inf() const { return last_found_inf_; }
  const Tensor& skipped_steps_tensor() const { return skipped_steps_; }
  int64_t skipped_steps() const;  // host read
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // PyTorch's GradScaler.state_dict() as safetensors entries: 0-d f32
  // tensors "scale" and "_growth_tracker", metadata "growth_factor",
  // "backoff_factor" and "growth_interval" (numbers as text). Empty when
  // disabled, as PyTorch's.
  StateDict state_dict() const;
  // Copies the scale and growth tracker in place; the factors and interval
  // must equal this scaler's options (compiled steps hold them). On any
  // error nothing has changed.
  absl::Status load_state_dict(const StateDict& state);
  // The checking half of load_state_dict (LoadPlan::Apply loads).
  absl::StatusOr<LoadPlan> PlanLoad(const StateDict& state) const;

 private:
  struct PerOptimizer {
    bool unscaled = false;
    bool stepped = false;
    Tensor found_inf;  // 0-d f32, 0 or 1
  };
  PerOptimizer& StateFor(const optim::Optimizer& opt);

  GradScalerOptions options_;
  Tensor scale_;
  Tensor growth_tracker_;
  Tensor last_found_inf_;
  Tensor skipped_steps_;
  absl::flat_hash_map<const optim::Optimizer*, PerOptimizer> per_opt_;
};

}  // namespace stepjit::amp

#endif  // STEPJIT_TRAINING_AMP_GRAD_SCALER_H_
