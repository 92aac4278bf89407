// The accuracy checker: one call run compiled and eagerly from the same state,
// compared, and bisected.
//
// compile(step, {.check = true}) (or STEPJIT_CHECK=1 / =N) runs the first
// replays of each specialization this way; CompiledStep::check_next(n) asks
// for more. The compiled run goes first (Program::RunChecked: every
// generated region is also run interpreted on copies of its operands), then
// every state tensor and .grad binding is put back as it was and the step
// runs eagerly — the reference, whose results the call keeps. Every output,
// state tensor written (parameters, optimizer moments, scaler state) and
// bound .grad is compared under runtime::DefaultTolerance of its dtype (of
// the autocast dtype when the compiler applies mixed precision, since the
// eager step runs in f32 then). On a divergence the report names the worst
// tensor and the first generated region whose kernel disagrees with its
// body; when every region agrees, the graph itself computes differently
// from the step (a tracer or pass bug): the traced graph and the graph after
// each pass are run interpreted from the same start, and the report names
// the first that disagrees with the eager step.
#ifndef STEPJIT_FRONTEND_CHECKER_H_
#define STEPJIT_FRONTEND_CHECKER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend/tracer.h"
#include "program/executor.h"

namespace stepjit::frontend {

// Pass bisection for a divergence no generated region explains: `run(k)`
// runs the step's traced graph after the first k passes of `pipeline`,
// interpreted op by op, from the state tensors as they are, and returns the
// graph's returns (the step's outputs, then the .grad bindings).
struct PassBisection {
  std::vector<std::string> pipeline;
  std::function<absl::StatusOr<std::vector<Tensor>>(int k)> run;
};

struct CheckResult {
  bool diverged = false;
  // First line: the verdict and the worst tensor; then the guilty region
  // (with its IR) or what else to suspect.
  std::string report;
  std::vector<Tensor> outputs;  // the eager step's
};

// `trace.state` holds every state tensor the program reads and writes: the
// first `traced_state` the step's own, then the compiler's (the grad-scaler
// pass's scale and counters, which the eager step does not have: they keep
// the compiled run's values and are not compared). `amp` is the compiler's
// autocast dtype (kF32: none); `label` names the step and the replay.
CheckResult CheckCall(const std::string& label, const runtime::Program& program,
                      const Trace& trace, size_t traced_state, DType amp,
                      const std::vector<Tensor>& inputs,
                      const std::function<std::vector<Tensor>()>& eager,
                      const PassBisection* bisection = nullptr);

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_CHECKER_H_
