// The region backend interface: what a device implements so that a Program
// (program/executor.h) runs its fusion regions as generated code, and the
// registry that picks a backend by ProgramOptions::device.
//
// Contract. Program::Build and the device-neutral replay loop
// (program/replay.h) call a backend in this order:
//
//   Build  MakeRegionBackend(graph, options) makes the backend of
//          options.device (an error, e.g. no CUDA device, fails the Build).
//          With options.codegen, Compile(region) for every top-level fusion
//          node, in node order: a CompiledRegion runs as generated code;
//          Unimplemented (with the reason) means the backend does not lower
//          it and the loop interprets its body op by op; any other error
//          fails the Build (the caller runs the step eagerly). Then
//          FinishBuild() once: plan launches that span regions (multi-region
//          groups) and decide whether whole runs can be captured.
//   Run    Program::Run calls Run(inputs, state, loop) once per run. The
//          backend wraps the replay loop with what its device needs around
//          a whole run (begin: order its stream after the caller's; end:
//          the caller's after its own) and may capture one run of the loop
//          and replay the capture after (CUDA graphs), refreshing what a
//          replay must draw anew (Philox seeds and offsets) before each.
//          Program::RunChecked calls RunUncaptured instead: the loop once,
//          never captured, on the caller's order of work (the accuracy
//          checker reads results back between regions).
//   Loop   For each fusion node the loop first asks GroupStartingAt: a
//          backend that grouped consecutive independent regions launches
//          them together (LaunchGroup) at the first member; otherwise it
//          calls the node's CompiledRegion::Launch, and interprets the body
//          when the region has none or Launch declines (operands of another
//          dtype, shape or device than compiled for). Views, eager ops (all
//          through Dispatch), write-backs, freeing values after their last
//          use, profiling and the accuracy checker belong to the loop, the
//          same for every device.
//
// A backend never sees the loop's environment: it gets operands and returns
// results. Backends live under runtime/<device>/program/ (devices/cpu/
// program/: LLVM ORC; program/cuda/: NVRTC, CUDA graphs, multi-region
// groups); program/builtin_backends.cc registers them. A test or a
// new device registers its own with RegisterRegionBackend.
#ifndef STEPJIT_PROGRAM_REGION_BACKEND_H_
#define STEPJIT_PROGRAM_REGION_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/graph.h"
#include "program/program_options.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace stepjit::runtime {

// A fusion region as a backend compiled it.
class CompiledRegion {
 public:
  virtual ~CompiledRegion() = default;
  // Runs the region over `in` (the fusion node's operands in body-param
  // order, which it may replace with contiguous copies) and returns its
  // results in body-return order; nullopt, having launched nothing, when an
  // operand's dtype, shape or device differs from the compiled ones.
  virtual std::optional<std::vector<Tensor>> Launch(
      const ir::Graph& body, std::vector<Tensor>& in) = 0;
  // How the profiler names a launch: the kernel ("fused_3_ab12cd") or the
  // region and its device ("fused_3(cuda)").
  virtual std::string label() const = 0;
};

// A fusion region to compile. `body` is what to lower: the node's own body,
// or, under a test-support override (program/region_override.h), a
// deliberately wrong one that must not be cached (`cacheable` false).
struct RegionToCompile {
  const ir::Node* node = nullptr;
  const ir::Graph* body = nullptr;
  bool cacheable = true;
};

// What one run of the replay loop does differently while a backend captures
// it (the defaults: nothing).
struct RunHooks {
  // Every operand and result the run makes or reads is appended here: a
  // captured run's buffers must live as long as the capture.
  std::vector<Tensor>* keep_alive = nullptr;
};

// One run of the replay loop over `inputs` and `state` (in param order)
// under `hooks`; returns the graph's returns.
using ReplayLoop = std::function<std::vector<Tensor>(
    absl::Span<const Tensor> inputs, absl::Span<const Tensor> state,
    const RunHooks& hooks)>;

// One region's compile (lowering, optimization, object code or cache load).
struct RegionCompileTime {
  std::string kernel;
  double ms = 0;
  bool cache_hit = false;
  // What identifies the compiled code (the CPU kernel cache digest, a CUDA
  // region's source name): regions with the same key run the same code.
  std::string cache_key;
};

// Counters a backend keeps; Program's accessors read them.
struct BackendStats {
  // Regions whose object code came from a kernel cache, and the time spent
  // lowering, optimizing and compiling (or loading) them.
  int cached_regions = 0;
  double codegen_ms = 0;
  std::vector<RegionCompileTime> region_times;  // in completion order
  // Launch groups of several regions (one launch per phase) and the regions
  // in them.
  int region_groups = 0;
  int grouped_regions = 0;
  // Whole-run replay (CUDA graphs): whether runs replay a captured run
  // (after the first two), why not otherwise, and how many replays ran.
  bool replays_captured_run = false;
  std::string capture_reason;
  int64_t captured_replays = 0;
  // Bytes those replays copied (inputs in, results out, held results passed
  // on; program/cuda/cuda_graph.h).
  int64_t captured_copy_bytes = 0;
};

class RegionBackend {
 public:
  virtual ~RegionBackend() = default;

  // Build: the region compiled, Unimplemented (runs interpreted), or a
  // failure of the Build.
  virtual absl::StatusOr<std::unique_ptr<CompiledRegion>> Compile(
      const RegionToCompile& region) = 0;
  // Build, after every Compile.
  virtual void FinishBuild() {}
  // Whether Compile may run on several threads at once (Build then splits
  // the regions across the threads).
  virtual bool ConcurrentCompile() const { return false; }

  // Program::Run: the default runs the loop once as it is.
  virtual std::vector<Tensor> Run(absl::Span<const Tensor> inputs,
                                  absl::Span<const Tensor> state,
                                  const ReplayLoop& loop);
  // Program::RunChecked: the loop once, uncaptured, ordered with the
  // caller's work; the default runs it as it is.
  virtual std::vector<Tensor> RunUncaptured(absl::Span<const Tensor> inputs,
                                            absl::Span<const Tensor> state,
                                            const ReplayLoop& loop);

  // Multi-region launches: the members (consecutive top-level fusion nodes)
  // of the group launched at `first`, or none.
  virtual absl::Span<const ir::Node* const> GroupStartingAt(
      const ir::Node& first) const {
    return {};
  }
  // Launches the group starting at `first` over each member's operands
  // (`ins`, in member order; each may be replaced by a contiguous copy) and
  // returns each member's results; nullopt, having launched nothing, when a
  // member's operands differ from the compiled ones or members share a
  // buffer one of them writes. The loop then runs the members one by one.
  virtual std::optional<std::vector<std::vector<Tensor>>> LaunchGroup(
      const ir::Node& first, std::vector<std::vector<Tensor>>& ins) {
    return std::nullopt;
  }

  const BackendStats& stats() const { return stats_; }

 protected:
  BackendStats stats_;
};

// Makes the backend of a program of `graph` on `options.device`.
using RegionBackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<RegionBackend>>(
        const ir::Graph& graph, const ProgramOptions& options)>;
// Writes a backend's generated source of every region of `graph` to
// options.dump_dir when `options` ask for it, whatever the program's device
// (a CPU program dumps CUDA C with ProgramOptions::dump_cuda).
using RegionSourceDumper =
    std::function<void(const ir::Graph& graph, const ProgramOptions& options)>;

// Installs `factory` for `device` and returns the one it replaces (empty
// when none). Process-wide; not for use while programs are being built on
// other threads.
RegionBackendFactory RegisterRegionBackend(DeviceType device,
                                           RegionBackendFactory factory);
// Adds a dumper run by DumpRegionSources.
void RegisterRegionSourceDumper(RegionSourceDumper dumper);

// The backend for options.device: FailedPrecondition when none is
// registered, or the factory's error.
absl::StatusOr<std::unique_ptr<RegionBackend>> MakeRegionBackend(
    const ir::Graph& graph, const ProgramOptions& options);
// Runs every registered dumper.
void DumpRegionSources(const ir::Graph& graph, const ProgramOptions& options);

// Installs a backend factory for `device` while alive (tests).
class ScopedRegionBackend {
 public:
  ScopedRegionBackend(DeviceType device, RegionBackendFactory factory)
      : device_(device),
        previous_(RegisterRegionBackend(device, std::move(factory))) {}
  ~ScopedRegionBackend() {
    RegisterRegionBackend(device_, std::move(previous_));
  }
  ScopedRegionBackend(const ScopedRegionBackend&) = delete;
  ScopedRegionBackend& operator=(const ScopedRegionBackend&) = delete;

 private:
  DeviceType device_;
  RegionBackendFactory previous_;
};

}  // namespace stepjit::runtime

#endif  // STEPJIT_PROGRAM_REGION_BACKEND_H_
