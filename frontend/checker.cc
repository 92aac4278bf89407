// Accuracy checker: snapshot, compiled run with region checks, restore, eager run, compare.
#include "frontend/checker.h"

#include "absl/strings/str_cat.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/region_check.h"

namespace stepjit::frontend {
namespace {

struct Named {
  std::string name;
  Tensor got, want;
};

runtime::Tolerance ToleranceFor(DType t, DType amp) {
  if (ir::IsFloating(t) && amp != DType::kF32) return runtime::DefaultTolerance(amp);
  return runtime::DefaultTolerance(t);
}

std::vector<Tensor> Clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(t.defined() ? t.clone() : Tensor());
  return out;
}

std::shared_ptr<Tensor> GradOf(const Tensor& leaf) {
  return leaf.impl()->autograd ? leaf.impl()->autograd->grad : nullptr;
}

void SetGradOf(const Tensor& leaf, std::shared_ptr<Tensor> grad) {
  if (!leaf.impl()->autograd) leaf.impl()->autograd = std::make_unique<AutogradMeta>();
  leaf.impl()->autograd->grad = std::move(grad);
}

std::string Describe(const Tensor& t) {
  return absl::StrCat(ir::DTypeName(t.dtype()), ir::ShapeToString(t.shape()));
}

}  // namespace

CheckResult CheckCall(const std::string& label, const runtime::Program& program,
                      const Trace& trace, size_t traced_state, DType amp,
                      const std::vector<Tensor>& inputs,
                      const std::function<std::vector<Tensor>()>& eager) {
  const std::vector<Tensor>& state = trace.state;
  const std::vector<Tensor> before = Clones(state);
  std::vector<std::shared_ptr<Tensor>> grads_before;
  for (const GradBinding& b : trace.grad_bindings) grads_before.push_back(GradOf(b.leaf));

  // Compiled, as a replay would leave things.
  std::vector<runtime::RegionMismatch> regions;
  std::vector<Tensor> compiled = program.RunChecked(inputs, state, &regions);
  for (const GradBinding& b : trace.grad_bindings) {
    b.leaf.set_grad(b.return_index >= 0 ? compiled[b.return_index] : Tensor());
  }
  compiled.resize(trace.num_outputs);
  const std::vector<Tensor> compiled_out = Clones(compiled);
  const std::vector<Tensor> compiled_state = Clones(state);
  std::vector<Tensor> compiled_grads;
  for (const GradBinding& b : trace.grad_bindings) compiled_grads.push_back(b.leaf.grad());

  // Back to the start, then the reference.
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < state.size(); ++i) Tensor(state[i]).copy_(before[i]);
  }
  for (size_t i = 0; i < trace.grad_bindings.size(); ++i) {
    SetGradOf(trace.grad_bindings[i].leaf, grads_before[i]);
  }
  CheckResult result;
  result.outputs = eager();
  {
    NoGradGuard no_grad;
    for (size_t i = traced_state; i < state.size(); ++i) {
      Tensor(state[i]).copy_(compiled_state[i]);
    }
  }

  std::vector<Named> pairs;
  for (size_t i = 0; i < compiled_out.size() && i < result.outputs.size(); ++i) {
    pairs.push_back({absl::StrCat("output ", i), compiled_out[i], result.outputs[i]});
  }
  for (size_t i = 0; i < traced_state; ++i) {
    const bool param = state[i].requires_grad() && state[i].is_leaf();
    pairs.push_back({absl::StrCat("state %s", i, param ? " (a parameter)" : ""), compiled_state[i],
                     state[i]});
  }
  for (size_t i = 0; i < trace.grad_bindings.size(); ++i) {
    const Tensor& leaf = trace.grad_bindings[i].leaf;
    pairs.push_back({absl::StrCat(".grad of a ", Describe(leaf), " leaf"), compiled_grads[i],
                     leaf.grad()});
  }
  int compared = 0, bad = 0;
  const Named* worst = nullptr;
  runtime::TensorDiff worst_diff;
  for (const Named& p : pairs) {
    if (p.got.defined() != p.want.defined()) {
      ++bad;
      if (worst == nullptr) {
        worst = &p;
        worst_diff.shape_differs = true;
      }
      continue;
    }
    if (!p.got.defined()) continue;
    ++compared;
    const runtime::TensorDiff d =
        runtime::CompareTensors(p.got, p.want, ToleranceFor(p.want.dtype(), amp));
    if (d.ok()) continue;
    ++bad;
    if (worst == nullptr || worst_diff.ok() ||
        (!worst_diff.shape_differs && d.max_rel_error > worst_diff.max_rel_error)) {
      worst = &p;
      worst_diff = d;
    }
  }
  if (bad == 0 && regions.empty()) {
    result.report = absl::StrCat("stepjit check [", label, "]: OK — ", compared,
                                 " outputs, state tensors and grads match the eager step\n");
    return result;
  }
  result.diverged = true;
  std::string& r = result.report;
  if (bad > 0) {
    r = absl::StrCat("stepjit check [", label, "]: DIVERGED — ", bad, " of ", pairs.size(),
                     " tensors differ from the eager step; worst: ", worst->name, " ",
                     Describe(worst->want), ": ",
                     worst_diff.shape_differs
                         ? std::string("defined on one side only or of another shape")
                         : runtime::ToString(worst_diff, worst->want.shape()),
                     "\n");
  } else {
    r = absl::StrCat("stepjit check [", label, "]: DIVERGED inside — the step's results agree "
                     "with eager within tolerance, but a generated region does not agree with "
                     "its own body\n");
  }
  if (!regions.empty()) {
    const runtime::RegionMismatch& first = regions.front();
    absl::StrAppend(&r, "guilty region (the first whose generated kernel disagrees with its body "
                        "run op by op): ", runtime::ToString(first), "\n",
                    first.call_ir, "\n", first.region_ir);
    if (regions.size() > 1) {
      absl::StrAppend(&r, "(", regions.size() - 1,
                      " later region results also disagree; they may only inherit the error)\n");
    }
  } else {
    absl::StrAppend(&r, "every generated region agrees with its body run op by op: the graph "
                        "itself computes differently from the eager step (a tracer or pass "
                        "bug); STEPJIT_DISABLE=<pass>,... and STEPJIT_DUMP=<dir> bisect the "
                        "passes\n");
  }
  return result;
}

}  // namespace stepjit::frontend
