// Specialization: one traced and compiled form of a step, with everything that
// decides when it may replay.
#ifndef STEPJIT_FRONTEND_SPECIALIZATION_H_
#define STEPJIT_FRONTEND_SPECIALIZATION_H_

#include <optional>
#include <string>
#include <vector>

#include "frontend/guards.h"
#include "frontend/trace_record.h"
#include "frontend/tracer.h"
#include "program/executor.h"

namespace stepjit::frontend {

// A low-precision copy of a state tensor that the compiled step reads in
// place of casting it (passes/amp_weight_copies.h): trace.state[copy] holds
// trace.state[source] converted. The step keeps it current as it updates the
// source; a write from outside (the source's storage version moved since the
// last replay) is caught before the next run.
struct StateCopy {
  size_t copy = 0, source = 0;
  bool current = false;  // as of the last replay
  const void* storage = nullptr;
  uint64_t version = 0;
};

// Converts every state copy whose source changed since the last replay.
void RefreshStateCopies(std::vector<StateCopy>& copies,
                        const std::vector<Tensor>& state);
// After a replay: each copy equals its source as the source is now.
void MarkStateCopiesCurrent(std::vector<StateCopy>& copies,
                            const std::vector<Tensor>& state);

struct Specialization {
  Signature signature;
  // Specializations that are one step at different input sizes (symbolic
  // dims, Shapes::kDynamic) share a family; max_traces counts families.
  int family = 0;
  // The call count at this specialization's last replay: the least recently
  // used concrete shape of a family is the one dropped beyond max_shapes.
  int64_t last_used = 0;
  Trace trace;  // empty graph when eager_only
  // A concrete shape of a family built from a recording: its kernels take
  // their sizes at run time and are shared with the family's other shapes.
  bool shape_generic = false;
  // The trace as recorded, before any pass changed its graph: what a
  // shape-only re-trace is compared with.
  TraceRecord record;
  // The traced graph's text, for the accuracy checker's pass bisection.
  std::string traced_ir;
  Device device = Device::cpu();
  // State tensors no guard sees rebound (UnguardedState): each replay is
  // re-traced shape-only while there are any.
  std::vector<std::string> unguarded;
  StateGuards state_guards;
  std::optional<runtime::Program> program;
  bool eager_only = false;
  std::string reason;  // why eager-only
  // Per-pass statistics and memory-plan's planned peak, from its build.
  std::string pass_stats;
  int64_t planned_peak_bytes = 0;
  // Where the build's time went: the pass pipeline and Program::Build.
  double passes_ms = 0, build_ms = 0;
  int64_t replays = 0;
  // Of trace.state, the step's own tensors (the rest are the compiler's).
  size_t traced_state = 0;
  std::vector<StateCopy> state_copies;
  // Lifted host numbers (trace_record.h): the record's node indices, the
  // 0-d tensors the program reads them from (filled per call), and the
  // program's inputs: the step's, then those.
  std::vector<size_t> lifted;
  std::vector<Tensor> lifted_inputs;
  std::vector<Tensor> program_inputs;
  // Replays still to run through the accuracy checker.
  int check_left = 0;
  // A state guard failed and one call ran eagerly since: the next miss
  // retraces.
  bool settled_after_miss = false;
};

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_SPECIALIZATION_H_
