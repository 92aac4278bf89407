// Accuracy checker: snapshot, compiled run with region checks, restore, eager
// run, compare, bisect.
#include "frontend/checker.h"

#include "absl/strings/str_cat.h"
#include "program/region_check.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/generator.h"

namespace stepjit::frontend {
namespace {

std::vector<Tensor> Clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(t.defined() ? t.clone() : Tensor());
  return out;
}

void CopyInto(const std::vector<Tensor>& to, const std::vector<Tensor>& from,
              size_t begin, size_t end) {
  NoGradGuard no_grad;
  for (size_t i = begin; i < end; ++i) Tensor(to[i]).copy_(from[i]);
}

std::string Describe(const Tensor& t) {
  return absl::StrCat(ir::DTypeName(t.dtype()), ir::ShapeToString(t.shape()));
}

// What one run of the step left: its outputs, its state (the step's own
// tensors), and the .grad of each bound leaf.
struct Results {
  std::vector<Tensor> outputs, state, grads;
};

// Takes a run's returns (outputs, then .grad bindings) and the state as it is.
Results Collect(const Trace& trace, size_t traced_state,
                const std::vector<Tensor>& returns) {
  Results r;
  for (int i = 0; i < trace.num_outputs && i < static_cast<int>(returns.size());
       ++i) {
    r.outputs.push_back(returns[i].clone());
  }
  for (size_t i = 0; i < traced_state; ++i)
    r.state.push_back(trace.state[i].clone());
  for (const GradBinding& b : trace.grad_bindings) {
    const bool bound = b.return_index >= 0 &&
                       b.return_index < static_cast<int>(returns.size());
    r.grads.push_back(bound ? returns[b.return_index].clone() : Tensor());
  }
  return r;
}

struct Verdict {
  int compared = 0, bad = 0, total = 0;
  std::string worst;  // "<name> <type>: <diff>"
};

Verdict Compare(const Trace& trace, const Results& got, const Results& want,
                DType amp) {
  Verdict v;
  double worst_rel = -1;
  auto one = [&](const std::string& name, const Tensor& g, const Tensor& w) {
    ++v.total;
    if (g.defined() != w.defined()) {
      ++v.bad;
      if (worst_rel < 0)
        v.worst = absl::StrCat(name, ": defined on one side only");
      return;
    }
    if (!g.defined()) return;
    ++v.compared;
    const runtime::Tolerance tol =
        ir::IsFloating(w.dtype()) && amp != DType::kF32
            ? runtime::DefaultTolerance(amp)
            : runtime::DefaultTolerance(w.dtype());
    const runtime::TensorDiff d = runtime::CompareTensors(g, w, tol);
    if (d.ok()) return;
    ++v.bad;
    const double rel = d.shape_differs ? std::numeric_limits<double>::infinity()
                                       : d.max_rel_error;
    if (rel > worst_rel) {
      worst_rel = rel;
      v.worst = absl::StrCat(name, " ", Describe(w), ": ",
                             d.shape_differs ? std::string("shapes differ")
                                             : runtime::ToString(d, w.shape()));
    }
  };
  for (size_t i = 0; i < got.outputs.size() && i < want.outputs.size(); ++i) {
    one(absl::StrCat("output ", i), got.outputs[i], want.outputs[i]);
  }
  for (size_t i = 0; i < got.state.size() && i < want.state.size(); ++i) {
    const Tensor& t = trace.state[i];
    one(absl::StrCat("state %s", i,
                     t.requires_grad() && t.is_leaf() ? " (a parameter)" : ""),
        got.state[i], want.state[i]);
  }
  for (size_t i = 0; i < got.grads.size() && i < want.grads.size(); ++i) {
    one(absl::StrCat(".grad of a ", Describe(trace.grad_bindings[i].leaf),
                     " leaf"),
        got.grads[i], want.grads[i]);
  }
  return v;
}

// The first graph of the pipeline (the trace, then after each pass) whose
// interpreted run from `before` disagrees with `eager`.
std::string Bisect(const PassBisection& b, const Trace& trace,
                   size_t traced_state, DType amp,
                   const std::vector<Tensor>& before, uint64_t offset_before,
                   const Results& eager) {
  for (size_t k = 0; k <= b.pipeline.size(); ++k) {
    CopyInto(trace.state, before, 0, before.size());
    default_generator().set_offset(offset_before);
    const std::string graph =
        k == 0 ? std::string("the traced graph (before any pass)")
               : absl::StrCat("the graph after pass ", k, " `",
                              b.pipeline[k - 1], "`");
    absl::StatusOr<std::vector<Tensor>> returns = b.run(static_cast<int>(k));
    if (!returns.ok()) {
      return absl::StrCat("pass bisection stopped: running ", graph,
                          " interpreted failed: ", returns.status().message(),
                          "\n");
    }
    const Verdict v =
        Compare(trace, Collect(trace, traced_state, *returns), eager, amp);
    if (v.bad == 0) continue;
    if (k == 0) {
      return absl::StrCat(
          "pass bisection: ", graph, ", run op by op, already disagrees (",
          v.worst,
          "): the step does something the tracer did not record "
          "(a write through data_ptr(), host state it keeps)\n");
    }
    return absl::StrCat("pass bisection: ", graph,
                        " is the first to disagree when run op by "
                        "op (",
                        v.worst, "); STEPJIT_DISABLE=", b.pipeline[k - 1],
                        " and STEPJIT_DUMP=<dir> show it\n");
  }
  return "pass bisection: every graph of the pipeline agrees when run op by "
         "op; the "
         "divergence comes from running the program itself (its memory plan or "
         "kernels)\n";
}

}  // namespace

CheckResult CheckCall(const std::string& label, const runtime::Program& program,
                      const Trace& trace, size_t traced_state, DType amp,
                      const std::vector<Tensor>& inputs,
                      const std::function<std::vector<Tensor>()>& eager,
                      const PassBisection* bisection) {
  const std::vector<Tensor>& state = trace.state;
  const std::vector<Tensor> before = Clones(state);
  // Both runs draw the same random numbers (dropout masks), and the call
  // leaves the generator where an unchecked call would.
  Generator& generator = default_generator();
  const uint64_t offset_before = generator.offset();
  std::vector<Tensor> grads_before;
  for (const GradBinding& b : trace.grad_bindings)
    grads_before.push_back(b.leaf.grad());

  // Compiled, as a replay would leave things.
  std::vector<runtime::RegionMismatch> regions;
  const std::vector<Tensor> returns =
      program.RunChecked(inputs, state, &regions);
  for (const GradBinding& b : trace.grad_bindings) {
    b.leaf.set_grad(b.return_index >= 0 ? returns[b.return_index] : Tensor());
  }
  const Results compiled = Collect(trace, traced_state, returns);
  const std::vector<Tensor> compiler_state = Clones(state);

  // Back to the start, then the reference.
  CopyInto(state, before, 0, state.size());
  generator.set_offset(offset_before);
  for (size_t i = 0; i < trace.grad_bindings.size(); ++i) {
    trace.grad_bindings[i].leaf.set_grad(grads_before[i]);
  }
  CheckResult result;
  result.outputs = eager();
  Results reference;
  for (const Tensor& t : result.outputs) reference.outputs.push_back(t);
  for (size_t i = 0; i < traced_state; ++i) reference.state.push_back(state[i]);
  for (const GradBinding& b : trace.grad_bindings)
    reference.grads.push_back(b.leaf.grad());
  // The compiler's own state (the loss scale) goes on from the compiled run.
  CopyInto(state, compiler_state, traced_state, state.size());

  const Verdict v = Compare(trace, compiled, reference, amp);
  if (v.bad == 0 && regions.empty()) {
    result.report = absl::StrCat(
        "stepjit check [", label, "]: OK — ", v.compared,
        " outputs, state tensors and grads match the eager step\n");
    return result;
  }
  result.diverged = true;
  std::string& r = result.report;
  if (v.bad > 0) {
    r = absl::StrCat(
        "stepjit check [", label, "]: DIVERGED — ", v.bad, " of ", v.total,
        " tensors differ from the eager step; worst: ", v.worst, "\n");
  } else {
    r = absl::StrCat("stepjit check [", label,
                     "]: DIVERGED inside — the step's results agree "
                     "with eager within tolerance, but a generated region does "
                     "not agree with "
                     "its own body\n");
  }
  if (!regions.empty()) {
    const runtime::RegionMismatch& first = regions.front();
    absl::StrAppend(&r,
                    "guilty region (the first whose generated kernel disagrees "
                    "with its body "
                    "run op by op): ",
                    runtime::ToString(first), "\n", first.call_ir, "\n",
                    first.region_ir);
    if (regions.size() > 1) {
      absl::StrAppend(&r, "(", regions.size() - 1,
                      " later region results also disagree; they may only "
                      "inherit the error)\n");
    }
    return result;
  }
  absl::StrAppend(
      &r,
      "every generated region agrees with its body run op by op: the graph "
      "itself computes differently from the eager step (a tracer or pass "
      "bug)\n");
  if (bisection != nullptr) {
    // The bisection runs overwrite the state: keep the eager results.
    const Results eager_results{Clones(reference.outputs),
                                Clones(reference.state),
                                Clones(reference.grads)};
    const std::vector<Tensor> after = Clones(state);
    const uint64_t offset_after = generator.offset();
    absl::StrAppend(&r, Bisect(*bisection, trace, traced_state, amp, before,
                               offset_before, eager_results));
    CopyInto(state, after, 0, state.size());
    generator.set_offset(offset_after);
  }
  return result;
}

}  // namespace stepjit::frontend
