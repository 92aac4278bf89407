// optim::SGD: option validation and the torch.optim.SGD update.
#include "training/optim/sgd.h"

#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

namespace stepjit::optim {
namespace {

const SGDOptions& Validated(const SGDOptions& o) {
  SJ_REQUIRE(o.momentum >= 0.0, "SGD: invalid momentum value: ", o.momentum);
  SJ_REQUIRE(o.weight_decay >= 0.0,
             "SGD: invalid weight_decay value: ", o.weight_decay);
  SJ_REQUIRE(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
             "SGD: nesterov momentum requires a momentum > 0 and zero "
             "dampening, got momentum ",
             o.momentum, " and dampening ", o.dampening);
  return o;
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{{.params = std::move(params)}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer(std::move(groups), options.lr, Validated(options).weight_decay,
                "SGD"),
      options_(options),
      state_(params_.size()) {}

void SGD::step() {
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = Grads();
  const SGDOptions& o = options_;
  std::optional<runtime::RecordedRoutine> routine;
  if (runtime::GetDispatchObserver() != nullptr) {
    BeginStepRoutine(routine, grads,
                     {o.momentum, o.dampening, o.nesterov ? 1.0 : 0.0}, {},
                     /*all_lrs=*/false);
    if (routine->skipped()) return;
  }
  IncrementStep();
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = grads[i];
    if (!g.defined()) continue;
    const size_t grp = group_of(i);
    if (weight_decay(grp) != 0.0) g = g + p * weight_decay(grp);
    if (o.momentum != 0.0) {
      Tensor& buf = state_[i].momentum_buffer;
      if (!buf.defined()) {
        // PyTorch starts the buffer at the (decayed) grad, undamped.
        buf = g.clone();
        MarkOwnedState(buf);
      } else {
        buf.mul_(o.momentum).add_(g, 1.0 - o.dampening);
      }
      g = o.nesterov ? g + buf * o.momentum : buf;
    }
    p.sub_(g * lr_tensor(grp));
  }
}

}  // namespace stepjit::optim

namespace stepjit::optim {

SGD::Slots SGD::SlotsOf(size_t index) const {
  if (options_.momentum == 0.0) return {};
  return {&state_.at(index).momentum_buffer};
}

std::vector<std::string> SGD::SlotNames() const {
  if (options_.momentum == 0.0) return {};
  return {"momentum_buffer"};
}

void SGD::CreateSlots(size_t index) {
  Tensor& buf = state_[index].momentum_buffer;
  if (options_.momentum == 0.0 || buf.defined()) return;
  buf = zeros_like(params_[index]);
  MarkOwnedState(buf);
}

std::vector<std::pair<std::string, std::string>> SGD::HyperParameters(
    size_t group) const {
  return {{"momentum", absl::StrFormat("%.17g", options_.momentum)},
          {"dampening", absl::StrFormat("%.17g", options_.dampening)},
          {"nesterov", options_.nesterov ? "true" : "false"},
          {"maximize", "false"}};
}

std::vector<Tensor> SGD::state_tensors() const {
  std::vector<Tensor> out = Optimizer::state_tensors();
  for (const SGDState& s : state_) {
    if (s.momentum_buffer.defined()) out.push_back(s.momentum_buffer);
  }
  return out;
}

}  // namespace stepjit::optim
