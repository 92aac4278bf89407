// optim::lr_scheduler: learning-rate schedules as in torch.optim.lr_scheduler.
// A scheduler sets every parameter group's lr to its initial lr times the
// schedule's factor for the current step. The lr lives in 0-d tensors
// updated in place (optim::Optimizer), so calling step() between compiled
// training steps changes the lr without a retrace.
//
//   optim::AdamW opt(groups, {.lr = 3e-4});
//   optim::lr_scheduler::WarmupCosineLR sched(opt, {.warmup_steps = 100,
//                                                   .total_steps = 5000});
//   for (...) { fast(x, y); sched.step(); }
#ifndef STEPJIT_TRAINING_OPTIM_LR_SCHEDULER_H_
#define STEPJIT_TRAINING_OPTIM_LR_SCHEDULER_H_

#include <cstdint>
#include <vector>

#include "training/optim/optimizer.h"

namespace stepjit::optim::lr_scheduler {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one step and sets the groups' learning rates for it.
  void step();
  // How many times step() has run.
  int64_t last_step() const { return step_; }
  // The learning rates set last, one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }

 protected:
  // Sets the step-0 learning rates (construction).
  explicit LRScheduler(Optimizer& optimizer);
  void Apply();
  // The multiplier of the initial lr at step `step` (>= 0).
  virtual double Factor(int64_t step) const = 0;

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lr_;
  std::vector<double> last_lr_;
  int64_t step_ = 0;
};

struct WarmupCosineOptions {
  int64_t warmup_steps = 0;  // linear from 1/warmup_steps of the lr up to it
  int64_t total_steps = 1;   // the cosine reaches min_factor here and stays
  double min_factor = 0.0;   // the final lr as a fraction of the initial one
};

// Linear warmup, then cosine decay: factor(s) = (s + 1) / warmup for
// s < warmup, then min + (1 - min) * (1 + cos(pi * p)) / 2 with p the
// fraction of the decay steps done (p = 1 from total_steps on).
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, WarmupCosineOptions options);

 protected:
  double Factor(int64_t step) const override;

 private:
  WarmupCosineOptions options_;
};

// torch.optim.lr_scheduler.StepLR: the lr times gamma every step_size steps.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double Factor(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

}  // namespace stepjit::optim::lr_scheduler

#endif  // STEPJIT_TRAINING_OPTIM_LR_SCHEDULER_H_
