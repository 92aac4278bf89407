// Gradient-norm clipping from tensor ops only.
#include "training/nn/clip_grad.h"

#include <cmath>
#include <limits>

#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops.h"

namespace stepjit::nn::utils {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  SJ_REQUIRE(norm_type > 0 || std::isinf(norm_type),
             "clip_grad_norm_: norm_type must be positive or infinity, got ", norm_type);
  SJ_REQUIRE(max_norm >= 0 && !std::isnan(max_norm),
             "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  bool any_f64 = false;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    SJ_REQUIRE(ir::IsFloating(g.dtype()), "clip_grad_norm_: expected floating-point grads, got ",
               ir::DTypeName(g.dtype()));
    any_f64 |= g.dtype() == DType::kF64;
    grads.push_back(g);
  }
  const DType acc = any_f64 ? DType::kF64 : DType::kF32;
  if (grads.empty()) return scalar_tensor(0.0, {.dtype = acc});
  const bool inf_norm = std::isinf(norm_type);
  Tensor total;
  for (const Tensor& g : grads) {
    const Tensor a = abs(g.to(acc));
    Tensor part;
    if (inf_norm) part = amax(a);
    else if (norm_type == 2.0) part = sum(a * a);
    else if (norm_type == 1.0) part = sum(a);
    else part = sum(pow(a, scalar_tensor(norm_type, {.dtype = acc})));
    total = !total.defined() ? part : inf_norm ? maximum(total, part) : total + part;
  }
  if (!inf_norm && norm_type == 2.0) total = sqrt(total);
  else if (!inf_norm && norm_type != 1.0) total = pow(total, scalar_tensor(1.0 / norm_type, {.dtype = acc}));
  if (error_if_nonfinite) {
    const double v = total.item();
    SJ_REQUIRE(std::isfinite(v), "clip_grad_norm_: the total norm of order ", norm_type,
               " of the gradients is ", v, "; set error_if_nonfinite = false to clip anyway");
  }
  const Tensor coef = minimum(scalar_tensor(max_norm, {.dtype = acc}) / (total + 1e-6),
                              scalar_tensor(1.0, {.dtype = acc}));
  for (Tensor& g : grads) g.mul_(g.dtype() == acc ? coef : coef.to(g.dtype()));
  return total;
}

}  // namespace stepjit::nn::utils
