// optim::Optimizer: parameter validation, zero_grad and the lr/step tensors.
#include "training/optim/optimizer.h"

#include <string>
#include <utility>

#include "absl/base/casts.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/ops.h"
#include "training/nn/module.h"

namespace stepjit::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr,
                     double weight_decay, const char* name)
    : name_(name) {
  SJ_REQUIRE(!groups.empty(), name_, ": got no parameter groups");
  for (size_t g = 0; g < groups.size(); ++g) {
    SJ_REQUIRE(!groups[g].params.empty(), name_,
               groups.size() == 1
                   ? ": got an empty parameter list"
                   : absl::StrCat(": parameter group ", g, " is empty"));
    for (const Tensor& p : groups[g].params) {
      params_.push_back(p);
      group_of_.push_back(g);
    }
  }
  absl::flat_hash_set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    SJ_REQUIRE(p.defined(), name_, ": parameter ", i, " is undefined");
    SJ_REQUIRE(p.is_leaf(), name_, ": can't optimize parameter ", i,
               ", a non-leaf tensor");
    SJ_REQUIRE(ir::IsFloating(p.dtype()), name_, ": parameter ", i,
               " has non-floating dtype ",
               std::string(ir::DTypeName(p.dtype())));
    // A duplicate would be updated twice per step.
    SJ_REQUIRE(seen.insert(p.impl()).second, name_, ": parameter ", i,
               " appears more than once in the parameter list");
  }
  // Kept next to the parameters so that step() mixes no devices.
  const TensorOptions options{.dtype = DType::kF32,
                              .device = params_.front().device()};
  for (size_t g = 0; g < groups.size(); ++g) {
    const double group_lr = groups[g].lr.value_or(lr);
    const double group_wd = groups[g].weight_decay.value_or(weight_decay);
    SJ_REQUIRE(group_lr >= 0.0, name_, ": invalid learning rate: ", group_lr,
               groups.size() > 1 ? absl::StrCat(" (group ", g, ")") : "");
    SJ_REQUIRE(group_wd >= 0.0, name_,
               ": invalid weight_decay value: ", group_wd,
               groups.size() > 1 ? absl::StrCat(" (group ", g, ")") : "");
    groups_.push_back({scalar_tensor(group_lr, options), group_wd});
    MarkOwnedState(groups_.back().lr);
  }
  step_ = scalar_tensor(0.0, options);
  MarkOwnedState(step_);
}

std::vector<ParamGroup> DecayGroups(const nn::Module& module,
                                    double weight_decay) {
  ParamGroup decay{.weight_decay = weight_decay}, no_decay{.weight_decay = 0.0};
  for (const Tensor& p : module.parameters())
    (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  std::vector<ParamGroup> groups;
  for (ParamGroup* g : {&decay, &no_decay})
    if (!g->params.empty()) groups.push_back(std::move(*g));
  return groups;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (Tensor grad = p.grad(); grad.defined()) {
      grad.zero_();
    }
  }
}

double Optimizer::lr(size_t group) const { return lr_tensor(group).item(); }

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lr);
}

void Optimizer::set_lr(size_t group, double lr) {
  SJ_REQUIRE(group < groups_.size(), name_, ": no parameter group ", group,
             " (there are ", groups_.size(), ")");
  SJ_REQUIRE(lr >= 0.0, name_, ": invalid learning rate: ", lr);
  groups_[group].lr.fill_(lr);
}

void Optimizer::IncrementStep() { step_.add_(wrap_scalar(1.0, step_)); }

std::vector<Tensor> Optimizer::Grads() const {
  std::vector<Tensor> grads;
  grads.reserve(params_.size());
  for (const Tensor& p : params_) grads.push_back(p.grad());
  return grads;
}

void Optimizer::BeginStepRoutine(
    std::optional<runtime::RecordedRoutine>& routine,
    const std::vector<Tensor>& grads, std::initializer_list<double> options,
    std::initializer_list<const Tensor*> shared, bool all_lrs) const {
  // Per thread and reused: a recording call's optimizer step allocates
  // nothing here after the first (the routine copies them when it begins;
  // they hold no tensor beyond it).
  thread_local struct {
    std::vector<uint64_t> key;
    runtime::RoutineTensors tensors;
  } r;
  r.key.clear();
  r.tensors.clear();
  r.key.push_back(groups_.size());
  for (const Group& g : groups_)
    r.key.push_back(absl::bit_cast<uint64_t>(g.weight_decay));
  r.key.push_back(params_.size());
  thread_local std::vector<bool> group_used;
  thread_local std::vector<Slots> slots;
  group_used.assign(groups_.size(), all_lrs);
  slots.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    uint64_t bits = group_of_[i] << 2 | (grads[i].defined() ? 1 : 0);
    if (grads[i].defined()) {
      group_used[group_of_[i]] = true;
      slots[i] = SlotsOf(i);
      uint64_t defined = 0;
      for (size_t s = 0; s < slots[i].size(); ++s)
        defined |= uint64_t{slots[i][s]->defined()} << s;
      r.key.push_back(defined);
    }
    r.key.push_back(bits);
  }
  for (double o : options) r.key.push_back(absl::bit_cast<uint64_t>(o));
  r.tensors.Add(step_);
  for (const Tensor* t : shared) r.tensors.Add(*t);
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (group_used[g]) r.tensors.Add(groups_[g].lr);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!grads[i].defined()) continue;
    r.tensors.Add(params_[i]);
    r.tensors.Add(grads[i]);
    for (const Tensor* s : slots[i]) {
      if (s->defined()) r.tensors.Add(*s);
    }
  }
  for (Slots& s : slots) s.clear();
  routine.emplace(r.key, r.tensors);
  r.tensors.clear();
}

}  // namespace stepjit::optim
