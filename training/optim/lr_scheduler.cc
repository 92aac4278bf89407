// Learning-rate schedules: the factors and their application to the groups.
#include "training/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>

#include "ir/status.h"

namespace stepjit::optim::lr_scheduler {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_groups(); ++g)
    base_lr_.push_back(optimizer.lr(g));
}

void LRScheduler::Apply() {
  const double f = Factor(step_);
  last_lr_.clear();
  for (size_t g = 0; g < base_lr_.size(); ++g) {
    last_lr_.push_back(base_lr_[g] * f);
    optimizer_.set_lr(g, last_lr_.back());
  }
}

void LRScheduler::step() {
  ++step_;
  Apply();
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer,
                               WarmupCosineOptions options)
    : LRScheduler(optimizer), options_(options) {
  SJ_REQUIRE(
      options.warmup_steps >= 0 && options.total_steps > options.warmup_steps,
      "WarmupCosineLR: expected 0 <= warmup_steps < total_steps, got ",
      options.warmup_steps, " and ", options.total_steps);
  SJ_REQUIRE(options.min_factor >= 0.0 && options.min_factor <= 1.0,
             "WarmupCosineLR: min_factor must be in [0, 1], got ",
             options.min_factor);
  Apply();
}

double WarmupCosineLR::Factor(int64_t step) const {
  const WarmupCosineOptions& o = options_;
  if (step < o.warmup_steps)
    return static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  const double done =
      std::min(1.0, static_cast<double>(step - o.warmup_steps) /
                        static_cast<double>(o.total_steps - o.warmup_steps));
  return o.min_factor +
         (1.0 - o.min_factor) * 0.5 * (1.0 + std::cos(std::numbers::pi * done));
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  SJ_REQUIRE(step_size > 0, "StepLR: step_size must be positive, got ",
             step_size);
  SJ_REQUIRE(gamma > 0.0, "StepLR: gamma must be positive, got ", gamma);
  Apply();
}

double StepLR::Factor(int64_t step) const {
  return std::pow(gamma_, static_cast<double>(step / step_size_));
}

}  // namespace stepjit::optim::lr_scheduler
