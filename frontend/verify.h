// Shape-only re-trace: run a step once with meta dispatch to see what it would
// record now.
//
// C++ cannot inspect what a step's lambda captures, so guards cannot see a
// captured double that changed, a setter such as opt.set_lr(x) called inside
// the step, or a captured tensor variable assigned a new tensor. Running the
// step again under runtime::MetaModeGuard records the graph it would run now
// (ops, constants, the tensors it reads) while computing nothing and writing
// no tensor; the compiler compares that with the graph it compiled
// (frontend/trace_record.h).
#ifndef STEPJIT_FRONTEND_VERIFY_H_
#define STEPJIT_FRONTEND_VERIFY_H_

#include <functional>
#include <string>
#include <vector>

#include "frontend/tracer.h"

namespace stepjit::frontend {

struct ShapeOnlyTrace {
  Trace trace;
  // Non-empty when the re-trace cannot stand for the call (the step threw,
  // read a value to the host, or left a shape-only tensor behind): why.
  std::string inconclusive;
  // The step kept a shape-only tensor: a re-trace would do so again, so the
  // caller stops re-tracing this step.
  bool kept_meta_tensor = false;
};

// Runs `step` on `inputs` once in shape-only mode under a tracer named
// `name`. Leaves every tensor, every .grad binding and the default
// generator's offset as they were. The step's own host-side effects (a
// counter it increments) do happen: it really is called.
ShapeOnlyTrace TraceShapesOnly(
    const std::string& name, const std::vector<Tensor>& inputs,
    const std::function<std::vector<Tensor>()>& step);

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_VERIFY_H_
