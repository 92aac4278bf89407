// The replay executor: a Program built from an IR graph runs over bound
// tensors, its fusion regions compiled and launched by the region backend of
// its device (program/region_backend.h), everything else through
// Dispatch, in one device-neutral loop (program/replay.h).
#ifndef STEPJIT_PROGRAM_EXECUTOR_H_
#define STEPJIT_PROGRAM_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/graph.h"
#include "program/program_options.h"
#include "program/region_backend.h"
#include "program/region_check.h"
#include "program/replay.h"
#include "program/team_tuner.h"
#include "runtime/tensor.h"

namespace stepjit::runtime {

class Program {
 public:
  // The graph must outlive the program and must have passed ir::Verify.
  // Fails when options.device has no backend here (no CUDA device) or a
  // region's code generation fails for a reason other than Unimplemented.
  static absl::StatusOr<Program> Build(const ir::Graph& graph,
                                       ProgramOptions options = {});
  Program(Program&&) noexcept;
  Program& operator=(Program&&) noexcept;
  ~Program();

  // Binds `inputs` and `state` to the graph's input and state params (each
  // in param order), runs every node, and returns the graph's returns.
  std::vector<Tensor> Run(absl::Span<const Tensor> inputs,
                          absl::Span<const Tensor> state) const;

  // The accuracy checker's run (CompileOptions::check). Runs as Run does,
  // and every fusion region that runs as generated code (alone or in a
  // multi-region launch) also runs interpreted, its body op by op through
  // Dispatch (the eager kernels), on copies of its operands taken before the
  // kernel (which may write donated operands in place). Each result is
  // compared under DefaultTolerance (program/region_check.h); `mismatches`
  // gets one entry per disagreeing result, in run order. The run continues
  // with the generated results, so a later region is checked against its
  // own interpretation of the compiled values (a wrong region does not make
  // later ones look wrong), and state ends exactly as after Run. On CUDA it
  // runs on the caller's stream without a CUDA graph; comparing reads every
  // checked result back to the host. Costs a copy of every operand and an
  // eager run of every generated region, plus the comparisons (about 3x a
  // Run, bench/region_check_bench.cc); with profiling on, the reference's
  // ops are recorded too.
  std::vector<Tensor> RunChecked(absl::Span<const Tensor> inputs,
                                 absl::Span<const Tensor> state,
                                 std::vector<RegionMismatch>* mismatches) const;

  // Kernel launches one Run makes (views and no-op write-backs excluded; a
  // multi-region launch counts once).
  int kernels_per_run() const { return kernels_per_run_; }
  // Fusion regions running as generated code.
  int compiled_regions() const { return static_cast<int>(regions_.size()); }
  Device device() const { return options_.device; }
  // CUDA: groups of regions launched as one multi-region kernel per phase,
  // and the regions in them.
  int cuda_region_groups() const { return stats().region_groups; }
  int cuda_grouped_regions() const { return stats().grouped_regions; }
  // CUDA: whether runs replay a captured CUDA graph (after the first two),
  // why not otherwise, and how many replays ran.
  bool uses_cuda_graph() const { return stats().replays_captured_run; }
  const std::string& cuda_graph_reason() const {
    return stats().capture_reason;
  }
  int64_t cuda_graph_replays() const { return stats().captured_replays; }
  // Bytes those replays copied: inputs in, results out (a result the graph
  // owns is handed out uncopied) and held results passed on.
  int64_t cuda_graph_copied_bytes() const {
    return stats().captured_copy_bytes;
  }
  // Of the compiled regions, the ones whose object code came from the
  // kernel cache.
  int cached_regions() const { return stats().cached_regions; }
  // Time spent lowering, optimizing and compiling (or loading) kernels,
  // summed over the regions, and the wall time of that phase of Build
  // (less than the sum where regions compiled on several threads at once).
  double codegen_ms() const { return stats().codegen_ms; }
  double codegen_wall_ms() const { return codegen_wall_ms_; }
  // The regions' compile times (where the backend reports them), slowest
  // first.
  std::vector<RegionCompileTime> region_compile_times() const;
  // Fusion regions that run interpreted, op by op, in graph order, each
  // with why (the backend's Unimplemented reason, or codegen being off).
  struct InterpretedRegion {
    std::string region;
    std::string reason;
  };
  const std::vector<InterpretedRegion>& interpreted_regions() const {
    return interpreted_;
  }
  // CPU: the thread count replays run on now, chosen by timing them
  // (program/team_tuner.h), and the probes of other counts so far; null
  // where replays always run on every thread (one thread, CUDA,
  // STEPJIT_ADAPTIVE_THREADS=0).
  const TeamTuner* team_tuner() const { return tuner_.get(); }

 private:
  explicit Program(const ir::Graph* graph) : graph_(graph) {}
  const BackendStats& stats() const { return backend_->stats(); }
  ReplayPlan Plan() const;
  // `inputs`, and when the graph has a random param, this run's random
  // state (seed, shift) on the program's device after them; reserves the
  // run's draws from the default generator.
  std::vector<Tensor> WithRandomState(absl::Span<const Tensor> inputs) const;

  const ir::Graph* graph_;
  ProgramOptions options_;
  int kernels_per_run_ = 0;
  double codegen_wall_ms_ = 0;
  LaunchList launches_;
  RandomLayout random_layout_;
  // Declared before the backend, which points into them (launch groups),
  // so that they outlive it.
  CompiledRegions regions_;
  std::vector<InterpretedRegion> interpreted_;
  std::unique_ptr<TeamTuner> tuner_;
  std::unique_ptr<RegionBackend> backend_;
};

}  // namespace stepjit::runtime

#endif  // STEPJIT_PROGRAM_EXECUTOR_H_
