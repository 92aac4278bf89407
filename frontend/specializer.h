// Specializer: from a recorded trace to a Specialization ready to replay, and
// back pass by pass.
//
// It owns what every trace of one compiled step shares: the pass pipeline
// (with the autocast and grad-scaler passes that CompileOptions::amp and
// loss_scaling put in front), the tensors the compiler itself adds as state
// (the loss scale and its counters), and the program options. The accuracy
// checker's pass bisection rebuilds a specialization's traced graph after
// any prefix of that pipeline.
#ifndef STEPJIT_FRONTEND_SPECIALIZER_H_
#define STEPJIT_FRONTEND_SPECIALIZER_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "frontend/checker.h"
#include "frontend/compile.h"
#include "frontend/specialization.h"

namespace stepjit::frontend {

// Where a traced step runs: the device of its CUDA inputs or state, if any.
Device StepDevice(const Trace& trace, const std::vector<Tensor>& inputs);

class Specializer {
 public:
  // Checks the scaler options (amp::GradScaler's messages).
  explicit Specializer(const CompileOptions& options);

  // Verifies, optimizes and builds `trace` (trace number `index`, for
  // STEPJIT_DUMP), on `device`. A trace that cannot replay comes back
  // eager_only with the reason. `shape_generic`: its generated kernels take
  // their sizes at run time (runtime::ProgramOptions::shape_generic).
  std::unique_ptr<Specialization> Build(Signature signature, Trace trace,
                                        Device device, size_t index,
                                        bool shape_generic = false);

  // Runs `s`'s traced graph after the first k passes, interpreted, on
  // `inputs` (which must outlive the result) and s's state.
  PassBisection BisectionFor(const Specialization& s,
                             const std::vector<Tensor>& inputs) const;

  bool loss_scaling() const { return loss_scaling_; }
  // The state the pipeline's passes declare (PipelineState), by param name,
  // in declaration order.
  const std::vector<std::pair<std::string, Tensor>>& compiler_state() const {
    return compiler_state_;
  }
  // The compiler state param `name` (grad-scaler's %amp_scale), or nullptr.
  const Tensor* CompilerState(absl::string_view name) const;

 private:
  // Writes 000-trace.ir and .dot, then runs the pipeline for `device` (which
  // dumps NNN-<pass>.ir) and writes final.dot; records the pass statistics
  // in `spec`.
  absl::Status Optimize(ir::Graph& graph, size_t index, Device device,
                        Specialization& spec) const;
  // Binds the state params passes added to the compiler's own tensors,
  // after the traced state: grad-scaler's %amp_* to the tensors the pipeline
  // declared, amp-weight-copies' %<state>.as_<dtype> to a new tensor per
  // trace, recorded in spec.state_copies.
  absl::Status BindCompilerState(Specialization& spec, Device device);

  // options.pipeline behind the amp passes, for a world of `world_size`
  // ranks (the grad-scaler pass all-reduces its inf check across them).
  std::string Pipeline(int world_size) const;

  CompileOptions options_;
  bool loss_scaling_;
  // STEPJIT_DUMP's folder for this function: options.name, made unique in
  // the process (name-2, ...), fixed at its first trace; "" when off.
  const std::string& DumpRoot() const;
  mutable std::optional<std::string> dump_root_;
  std::vector<std::pair<std::string, Tensor>> compiler_state_;
};

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_SPECIALIZER_H_
