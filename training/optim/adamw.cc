// optim::AdamW: option validation and the torch.optim.AdamW update.
#include "training/optim/adamw.h"

#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

namespace stepjit::optim {
namespace {

const AdamWOptions& Validated(const AdamWOptions& o) {
  SJ_REQUIRE(o.eps >= 0.0, "AdamW: invalid epsilon value: ", o.eps);
  SJ_REQUIRE(o.beta1 >= 0.0 && o.beta1 < 1.0,
             "AdamW: invalid beta parameter at index 0: ", o.beta1,
             " (must be in [0, 1))");
  SJ_REQUIRE(o.beta2 >= 0.0 && o.beta2 < 1.0,
             "AdamW: invalid beta parameter at index 1: ", o.beta2,
             " (must be in [0, 1))");
  SJ_REQUIRE(o.weight_decay >= 0.0,
             "AdamW: invalid weight_decay value: ", o.weight_decay);
  return o;
}

}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW(std::vector<ParamGroup>{{.params = std::move(params)}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Optimizer(std::move(groups), options.lr, Validated(options).weight_decay,
                "AdamW"),
      options_(Validated(options)),
      state_(params_.size()) {
  // f64: 1 - beta^t magnifies beta's rounding error by 1/(1 - beta), so 0.999
  // rounded to f32 would put the bias correction off by 1.3e-5 at t = 1.
  // Being 0-d, they do not widen the parameter math they enter.
  const TensorOptions scalar{.dtype = DType::kF64,
                             .device = step_count().device()};
  beta1_ = scalar_tensor(options_.beta1, scalar);
  beta2_ = scalar_tensor(options_.beta2, scalar);
  MarkOwnedState(beta1_);
  MarkOwnedState(beta2_);
}

void AdamW::step() {
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = Grads();
  std::optional<runtime::RecordedRoutine> routine;
  if (runtime::GetDispatchObserver() != nullptr) {
    BeginStepRoutine(routine, grads,
                     {options_.beta1, options_.beta2, options_.eps},
                     {&beta1_, &beta2_}, /*all_lrs=*/true);
    if (routine->skipped()) return;
  }
  IncrementStep();
  const AdamWOptions& o = options_;
  // Shared by all parameters (per group for the lr): 0-d tensors, so
  // nothing is read to the host.
  const Tensor bias_correction1 = 1.0 - pow(beta1_, step_count());
  const Tensor bias_correction2_sqrt = sqrt(1.0 - pow(beta2_, step_count()));
  std::vector<Tensor> decay(num_groups()), step_size(num_groups());
  for (size_t g = 0; g < num_groups(); ++g) {
    if (weight_decay(g) != 0.0) decay[g] = 1.0 - lr_tensor(g) * weight_decay(g);
    step_size[g] = lr_tensor(g) / bias_correction1;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    CreateSlots(i);
    AdamWState& s = state_[i];
    const size_t grp = group_of(i);
    if (decay[grp].defined()) p.mul_(decay[grp]);
    s.exp_avg.lerp_(g, 1.0 - o.beta1);
    s.exp_avg_sq.mul_(o.beta2).addcmul_(g, g, 1.0 - o.beta2);
    const Tensor denom = sqrt(s.exp_avg_sq) / bias_correction2_sqrt + o.eps;
    p.sub_(s.exp_avg / denom * step_size[grp]);
  }
}

}  // namespace stepjit::optim

namespace stepjit::optim {

void AdamW::CreateSlots(size_t index) {
  AdamWState& s = state_[index];
  if (s.exp_avg.defined()) return;
  s.exp_avg = zeros_like(params_[index]);
  s.exp_avg_sq = zeros_like(params_[index]);
  MarkOwnedState(s.exp_avg);
  MarkOwnedState(s.exp_avg_sq);
}

AdamW::Slots AdamW::SlotsOf(size_t index) const {
  return {&state_.at(index).exp_avg, &state_.at(index).exp_avg_sq};
}

std::vector<std::pair<std::string, std::string>> AdamW::HyperParameters(
    size_t group) const {
  return {{"betas",
           absl::StrFormat("[%.17g,%.17g]", options_.beta1, options_.beta2)},
          {"eps", absl::StrFormat("%.17g", options_.eps)},
          {"amsgrad", "false"},
          {"maximize", "false"}};
}

std::vector<Tensor> AdamW::state_tensors() const {
  std::vector<Tensor> out = Optimizer::state_tensors();
  for (const AdamWState& s : state_) {
    if (s.exp_avg.defined()) out.insert(out.end(), {s.exp_avg, s.exp_avg_sq});
  }
  return out;
}

}  // namespace stepjit::optim
