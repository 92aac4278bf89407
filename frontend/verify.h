// The recording check: run a step's host code with meta dispatch to see what
// it does now, and run or make real what that recording stands for.
//
// C++ cannot inspect what a step's lambda captures, so guards cannot see a
// captured double that changed, a setter such as opt.set_lr(x) called inside
// the step, a frozen layer, or a captured tensor variable assigned a new
// tensor. Running the step under runtime::MetaModeGuard records what it
// would run now (ops, constants, the tensors it reads) while computing
// nothing and writing no tensor; a compiled step does this on every call
// and compares the record with the one it compiled, op by op as they arrive
// (frontend/trace_record.h).
#ifndef STEPJIT_FRONTEND_VERIFY_H_
#define STEPJIT_FRONTEND_VERIFY_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend/tracer.h"

namespace stepjit::frontend {

struct ShapeOnlyTrace {
  Trace trace;
  // Non-empty when the re-trace cannot stand for the call (the step threw,
  // or read a value to the host): why. `trace` then holds what was recorded
  // before that.
  std::string inconclusive;
  // Shape-only tensors the step kept (a module's cache such as GPT's
  // positions, lazily created optimizer state, a user's memo), with the
  // trace value each holds. They must become real before the step runs
  // again (RunRecorded).
  std::vector<Tracer::Kept> kept;
  const TraceRecord* expected = nullptr;
};

// Runs `step` on `inputs` once in shape-only mode under a tracer named
// `name`. Leaves every tensor, every .grad binding and the default
// generator's offset as they were. The step's own host-side effects (a
// counter it increments) do happen: it really is called.
// With `expected` (which must outlive the result), each op is compared
// with it as it arrives and nothing is stored while it matches
// (trace.matched; FullRecord gives the whole record). `expected_state`
// (which must outlive the result too): the state tensors bound to
// `expected`'s state params; a matched trace that kept nothing leaves
// those it shares with them out of trace.state (FullRecord puts them in).
ShapeOnlyTrace TraceShapesOnly(const std::string& name,
                               const std::vector<Tensor>& inputs,
                               const std::function<std::vector<Tensor>()>& step,
                               const TraceRecord* expected = nullptr,
                               absl::Span<const Tensor> expected_state = {});

// The whole record of the call (the matched part copied from `expected`),
// and its whole state.
const TraceRecord& FullRecord(ShapeOnlyTrace& recorded);

// Runs the call `recorded` stands for: its traced graph op by op on the real
// `inputs` and state (the eager kernels, as eager would compute), binds the
// .grads the step binds, and makes every kept shape-only tensor real with
// the value the step gave it. Returns the step's outputs. Fails, changing
// nothing, when the recording is incomplete or a kept tensor's value is
// unknown.
absl::StatusOr<std::vector<Tensor>> RunRecorded(
    ShapeOnlyTrace& recorded, const std::vector<Tensor>& inputs, Device device);

// Makes every kept shape-only tensor real with the value the step gave it,
// from the ops recorded before it (also when the recording stopped early:
// the step threw or read a value to the host), and nothing else: no state
// is written and the generator is left where it was.
absl::Status MakeKeptReal(ShapeOnlyTrace& recorded,
                          const std::vector<Tensor>& inputs, Device device);

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_VERIFY_H_
