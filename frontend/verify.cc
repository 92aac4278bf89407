// Shape-only re-trace: meta dispatch under a tracer, then undo what the run
// touched.
#include "frontend/verify.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "runtime/dispatch.h"
#include "runtime/generator.h"

namespace stepjit::frontend {

ShapeOnlyTrace TraceShapesOnly(
    const std::string& name, const std::vector<Tensor>& inputs,
    const std::function<std::vector<Tensor>()>& step) {
  ShapeOnlyTrace out;
  Generator& generator = default_generator();
  const uint64_t offset = generator.offset();
  const int64_t live_before = LiveMetaStorages();
  {
    Tracer tracer(name, /*remember_grads=*/true);
    std::vector<Tensor> outputs;
    {
      runtime::MetaModeGuard meta;
      tracer.Begin(inputs);
      try {
        outputs = step();
      } catch (const std::exception& e) {
        out.inconclusive = absl::StrCat(
            "the step threw during the shape-only re-trace: ", e.what());
      }
      out.trace = tracer.End(outputs);
    }
    // Autograd bound shape-only gradients to leaves: put the real ones back.
    for (const GradBefore& g : out.trace.grad_before) g.leaf.set_grad(g.grad);
    out.trace.grad_before.clear();
  }
  generator.set_offset(offset);
  if (out.inconclusive.empty() && !out.trace.break_reason.empty()) {
    out.inconclusive = absl::StrCat(
        "the shape-only re-trace hit a graph break: ", out.trace.break_reason);
  }
  if (out.inconclusive.empty() && LiveMetaStorages() != live_before) {
    out.kept_meta_tensor = true;
    out.inconclusive =
        "the step kept a tensor it created during the shape-only re-trace (it "
        "stored it in state outside the step, e.g. lazily created optimizer "
        "state)";
  }
  return out;
}

}  // namespace stepjit::frontend
