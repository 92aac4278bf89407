// GradScaler: loss scaling, device-side inf/NaN detection, predicated
// optimizer steps and the scale update, all as tensor ops.
#include "training/amp/grad_scaler.h"

#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dist/dist.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops.h"

namespace stepjit::amp {

namespace {

const GradScalerOptions& Validated(const GradScalerOptions& o) {
  SJ_REQUIRE(o.init_scale > 0 && std::isfinite(o.init_scale),
             "GradScaler: init_scale must be a positive finite number, got ", o.init_scale);
  SJ_REQUIRE(o.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ", o.growth_factor);
  SJ_REQUIRE(o.backoff_factor > 0.0 && o.backoff_factor < 1.0,
             "GradScaler: backoff_factor must be in (0, 1), got ", o.backoff_factor);
  SJ_REQUIRE(o.growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got ",
             o.growth_interval);
  return o;
}

// 1 when `g` holds an inf or NaN, else 0 (0-d f32): inf * 0 and NaN * 0 are
// NaN, so the sum is NaN exactly then.
Tensor NonFinite(const Tensor& g) {
  const Tensor s = sum(g * 0.0);
  return ne(s, s).to(DType::kF32);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(Validated(options)) {
  const TensorOptions on{.device = options_.device};
  scale_ = scalar_tensor(options_.init_scale, on);
  growth_tracker_ = scalar_tensor(0.0, on);
  last_found_inf_ = scalar_tensor(0.0, on);
  skipped_steps_ = scalar_tensor(0.0, on);
  for (const Tensor* t : {&scale_, &growth_tracker_, &last_found_inf_, &skipped_steps_}) {
    MarkOwnedState(*t);
  }
}

GradScaler::PerOptimizer& GradScaler::StateFor(const optim::Optimizer& opt) {
  PerOptimizer& s = per_opt_[&opt];
  if (!s.found_inf.defined()) {
    s.found_inf = scalar_tensor(0.0, {.device = options_.device});
    MarkOwnedState(s.found_inf);
  }
  return s;
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  SJ_REQUIRE(ir::IsFloating(loss.dtype()), "GradScaler::scale: expected a floating-point loss, got ",
             ir::DTypeName(loss.dtype()));
  // In the loss's dtype only if that is f32 or wider: a scaled f16 loss
  // could overflow, so low-precision losses are scaled in f32.
  const Tensor l = loss.dtype() == DType::kF64 ? loss : loss.to(DType::kF32);
  return l * scale_;
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!options_.enabled) return;
  PerOptimizer& s = StateFor(opt);
  SJ_REQUIRE(!s.unscaled, "GradScaler::unscale_: already called for this optimizer since the "
                          "last update()");
  SJ_REQUIRE(!s.stepped, "GradScaler::unscale_: called after step() for this optimizer; call "
                         "update() first");
  NoGradGuard no_grad;
  const Tensor inv = reciprocal(scale_);
  Tensor found = s.found_inf;
  for (const Tensor& p : opt.parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g.mul_(g.dtype() == DType::kF32 ? inv : inv.to(g.dtype()));
    // After unscaling: an inf or NaN grad stays one, and an unscaling that
    // itself overflows (a tiny scale) is caught too.
    found = maximum(found, NonFinite(g));
  }
  // Data-parallel ranks skip the same steps: an inf on any rank counts.
  if (dist::world_size() > 1)
    found = dist::all_reduce(found, dist::ReduceOp::kMax);
  s.found_inf = found;
  s.unscaled = true;
}

void GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return;
  }
  PerOptimizer& s0 = StateFor(opt);
  SJ_REQUIRE(!s0.stepped, "GradScaler::step: already called for this optimizer since the last "
                          "update()");
  if (!s0.unscaled) unscale_(opt);
  PerOptimizer& s = StateFor(opt);
  NoGradGuard no_grad;
  // What the step may change, as it was: parameters with grads, and the
  // optimizer's state tensors that exist already.
  std::vector<std::pair<Tensor, Tensor>> saved;
  for (const Tensor& p : opt.parameters()) {
    if (p.grad().defined()) saved.emplace_back(p, p.clone());
  }
  const std::vector<Tensor> state_before = opt.state_tensors();
  for (const Tensor& t : state_before) saved.emplace_back(t, t.clone());
  opt.step();
  const Tensor skip = gt(s.found_inf, scalar_tensor(0.0, {.device = options_.device}));
  for (auto& [t, before] : saved) t.copy_(where(skip, before, t));
  // State created by this step (a first step) returns to zeros if skipped.
  for (Tensor t : opt.state_tensors()) {
    bool existed = false;
    for (const Tensor& b : state_before) existed |= b.is_same(t);
    if (!existed) t.copy_(where(skip, zeros_like(t), t));
  }
  s.stepped = true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  NoGradGuard no_grad;
  Tensor found;
  for (auto& [opt, s] : per_opt_) {
    (void)opt;
    found = found.defined() ? maximum(found, s.found_inf) : s.found_inf;
  }
  per_opt_.clear();
  SJ_REQUIRE(found.defined(), "GradScaler::update: no unscale_() or step() ran since the last "
                              "update()");
  const Tensor inf = gt(found, scalar_tensor(0.0, {.device = options_.device}));
  const Tensor zero = scalar_tensor(0.0, {.device = options_.device});
  const Tensor tracker = where(inf, zero, growth_tracker_ + 1.0);
  const Tensor grow = ge(tracker, scalar_tensor(static_cast<double>(options_.growth_interval),
                                                   {.device = options_.device}));
  const Tensor new_scale =
      where(inf, scale_ * options_.backoff_factor,
            where(grow, scale_ * options_.growth_factor, scale_));
  growth_tracker_.copy_(where(grow, zero, tracker));
  scale_.copy_(new_scale);
  last_found_inf_.copy_(found);
  skipped_steps_.add_(found);
}

double GradScaler::get_scale() const { return options_.enabled ? scale_.item() : 1.0; }

int64_t GradScaler::growth_tracker() const {
  return static_cast<int64_t>(growth_tracker_.item());
}

StateDict GradScaler::state_dict() const {
  StateDict sd;
  if (!options_.enabled) return sd;
  sd.tensors = {{"scale", scale_.detach()},
                {"_growth_tracker", growth_tracker_.detach()}};
  sd.metadata = {
      {"growth_factor", absl::StrFormat("%.17g", options_.growth_factor)},
      {"backoff_factor", absl::StrFormat("%.17g", options_.backoff_factor)},
      {"growth_interval", absl::StrCat(options_.growth_interval)}};
  return sd;
}

absl::StatusOr<LoadPlan> GradScaler::PlanLoad(const StateDict& state) const {
  const auto error = [](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("GradScaler load_state_dict: ", parts...));
  };
  const StateDict want = state_dict();
  if (!options_.enabled) {
    if (state.tensors.empty() && state.metadata.empty()) return LoadPlan();
    return error("this scaler is disabled; the state dict holds ",
                 state.tensors.size(),
                 " tensors (a disabled scaler's state dict is empty)");
  }
  for (const auto& [key, value] : want.metadata) {
    const auto it = state.metadata.find(key);
    double found = 0, expected = 0;
    SJ_CHECK(absl::SimpleAtod(value, &expected));
    if (it == state.metadata.end() || !absl::SimpleAtod(it->second, &found) ||
        found != expected) {
      return error(
          key, " is ",
          it == state.metadata.end() ? "missing" : "'" + it->second + "'",
          " in the state dict but ", value,
          " in this scaler (construct it with the saved options)");
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : state.tensors) {
    if (name != "scale" && name != "_growth_tracker")
      unexpected.push_back(name);
  }
  if (!unexpected.empty()) {
    return error("unexpected tensors ", NameList(unexpected),
                 " (expected scale and _growth_tracker)");
  }
  LoadPlan plan;
  for (const auto& [name, dst] : want.tensors) {
    const Tensor* src = state.find(name);
    if (src == nullptr) return error("tensor '", name, "' is missing");
    // PyTorch keeps the growth tracker as i32: any dtype with one element.
    if (src->numel() != 1) {
      return error("'", name, "': expected one element, found shape ",
                   ir::ShapeToString(src->shape()));
    }
    const double v = src->item();
    if (name == "scale") {
      // Used as f32, with 1/scale unscaling every gradient: both must be
      // finite f32 numbers (1.4e-45 is a valid f32, its inverse is inf).
      const float f = static_cast<float>(v);
      if (!(v > 0) || !std::isfinite(f) || !std::isfinite(1.0f / f)) {
        return error("'scale' is ", v,
                     ", not a positive scale whose value and inverse are "
                     "finite in f32 (",
                     1.0 / std::numeric_limits<float>::max(), " to ",
                     std::numeric_limits<float>::max(), ")");
      }
    } else if (!(v >= 0 && v == std::floor(v) &&
                 v <= std::numeric_limits<int32_t>::max())) {
      // PyTorch keeps the tracker as i32.
      return error("'", name, "' is ", v, ", not a count of steps (0 to ",
                   std::numeric_limits<int32_t>::max(), ")");
    }
    plan.Then([dst, v] { Tensor(dst).fill_(v); });
  }
  return plan;
}

absl::Status GradScaler::load_state_dict(const StateDict& state) {
  ASSIGN_OR_RETURN(LoadPlan plan, PlanLoad(state));
  plan.Apply();
  return absl::OkStatus();
}

int64_t GradScaler::skipped_steps() const { return static_cast<int64_t>(skipped_steps_.item()); }

}  // namespace stepjit::amp
