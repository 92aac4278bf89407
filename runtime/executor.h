// The replay executor: runs a Program built from an IR graph over bound tensors.
#ifndef STEPJIT_RUNTIME_EXECUTOR_H_
#define STEPJIT_RUNTIME_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codegen/cpu/region_kernel.h"
#include "codegen/cuda/cuda_emitter.h"
#include "ir/graph.h"
#include "runtime/region_check.h"
#include "runtime/tensor.h"

namespace stepjit::runtime {

// How a Program is built. A program runs each fusion region the backend
// lowers as generated code and every other node (and region) through
// Dispatch with the eager kernels, autograd off.
struct ProgramOptions {
  // Compile fusion regions to native code (LLVM ORC) where the CPU backend
  // lowers them; other regions are interpreted. Non-contiguous operands are
  // copied to contiguous buffers before a generated kernel runs.
  bool codegen = true;
  // When set, each generated kernel's LLVM IR is written there as
  // <kernel>.ll (as lowered) and <kernel>.opt.ll (after -O2).
  // Kernels come from the process-wide kernel cache unless use_cache=false.
  std::string dump_dir;
  // With dump_dir: also write the CUDA C the CUDA backend emits for each
  // region it lowers (<region>.cu) and, with cuda_ptx_arch ("sm_90"), its
  // PTX from NVRTC (<region>.ptx). STEPJIT_DUMP_CUDA=cu|ptx[:sm_XX] sets
  // these from the environment (the frontend reads it).
  bool dump_cuda = false;
  std::string cuda_ptx_arch;
  bool use_cache = true;
  // Where the program runs: the device of the tensors it is bound to. On
  // CUDA every fusion region the CUDA emitter lowers becomes one NVRTC
  // kernel (loaded on the backend at Build), other nodes run as eager CUDA
  // ops, and the whole run is queued on the program's own stream.
  Device device = Device::cpu();
  // On CUDA: capture the second run into a CUDA graph and replay it after
  // (inputs copied into the captured buffers, outputs copied out), when
  // every node can be captured (no random ops, no host round trips).
  bool cuda_graphs = true;
  // On CUDA: launch runs of consecutive independent regions (the optimizer's
  // per-parameter updates, the grad scaler's per-gradient checks) as one
  // multi-region kernel per phase instead of one set of kernels per region
  // (runtime/region_groups.h, codegen/cuda/multi_region.h).
  bool cuda_multi_region = true;

  // The defaults with `dump_dir` and STEPJIT_DUMP_CUDA=cu|ptx[:sm_XX]
  // applied (dump_cuda, and cuda_ptx_arch for ptx: sm_90 unless named).
  static ProgramOptions WithDumps(std::string dump_dir);
};

struct CompiledRegion {
  codegen::cpu::RegionKernel kernel;
  std::vector<int> return_alias;  // body param whose buffer a return reuses
};
using RegionMap = absl::flat_hash_map<const ir::Node*, CompiledRegion>;

namespace cuda {
struct LoadedRegion;
}
struct CudaRegion {
  std::shared_ptr<const cuda::LoadedRegion> region;
  std::vector<int> return_alias;
};
using CudaRegionMap = absl::flat_hash_map<const ir::Node*, CudaRegion>;
// Regions launched together as one multi-region kernel per phase.
struct CudaRegionGroup {
  std::vector<const ir::Node*> members;  // consecutive in the graph
  std::vector<CudaRegion> regions;       // each member's own compiled region
  std::shared_ptr<const cuda::LoadedRegion> module;
  std::vector<codegen::cuda::RegionSource> layouts;  // as emitted for the module
};
// By each member node.
using CudaGroupMap = absl::flat_hash_map<const ir::Node*, std::shared_ptr<const CudaRegionGroup>>;
// Runs `group` at its first member: binds every member's operands from `env`
// and stores their results there. False (nothing launched) when a member's
// operands differ from the compiled ones or members share a written buffer;
// the caller then runs the members one by one. `keep_alive` as in RunContext.
bool RunCudaGroup(const CudaRegionGroup& group, std::vector<Tensor>& env,
                  std::vector<Tensor>* keep_alive);
struct CudaGraphReplay;

class Program {
 public:
  // The graph must outlive the program and must have passed ir::Verify.
  static absl::StatusOr<Program> Build(const ir::Graph& graph, ProgramOptions options = {});
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
  // compared under DefaultTolerance (runtime/region_check.h); `mismatches`
  // gets one entry per disagreeing result, in run order. The run continues
  // with the generated results, so a later region is checked against its
  // own interpretation of the compiled values (a wrong region does not make
  // later ones look wrong), and state ends exactly as after Run. On CUDA it
  // runs on the caller's stream without a CUDA graph; comparing reads every
  // checked result back to the host. Costs a copy of every operand and an
  // eager run of every generated region, plus the comparisons (about 3x a
  // Run, bench/region_check_bench.cc); with profiling on, the reference's
  // ops are recorded too.
  std::vector<Tensor> RunChecked(absl::Span<const Tensor> inputs, absl::Span<const Tensor> state,
                                 std::vector<RegionMismatch>* mismatches) const;

  // Kernel launches one Run makes (views and no-op write-backs excluded).
  int kernels_per_run() const { return kernels_per_run_; }
  // Fusion regions running as generated code.
  int compiled_regions() const {
    return static_cast<int>(regions_.size() + cuda_regions_.size());
  }
  Device device() const { return options_.device; }
  // CUDA: groups of regions launched as one multi-region kernel per phase,
  // and the regions in them.
  int cuda_region_groups() const { return cuda_region_groups_; }
  int cuda_grouped_regions() const { return cuda_grouped_regions_; }
  // CUDA: whether runs replay a captured CUDA graph (after the first two),
  // why not otherwise, and how many replays ran.
  bool uses_cuda_graph() const { return graphable_; }
  const std::string& cuda_graph_reason() const { return graph_reason_; }
  int64_t cuda_graph_replays() const;
  // Of those, the ones whose object code came from the kernel cache.
  int cached_regions() const { return cached_regions_; }
  // Time spent lowering, optimizing and compiling (or loading) kernels.
  double codegen_ms() const { return codegen_ms_; }
  // Fusion regions that run interpreted, op by op, in graph order, each
  // with why (the backend's Unimplemented reason, or codegen being off).
  struct InterpretedRegion {
    std::string region;
    std::string reason;
  };
  const std::vector<InterpretedRegion>& interpreted_regions() const {
    return interpreted_;
  }

 private:
  explicit Program(const ir::Graph* graph);
  // keep_alive, philox_device and checker: see RunContext (executor.cc).
  std::vector<Tensor> RunOnce(absl::Span<const Tensor> inputs, absl::Span<const Tensor> state,
                              std::vector<Tensor>* keep_alive, const uint64_t* philox_device,
                              RegionChecker* checker = nullptr) const;
  // Before a graph launch: draws this replay's seeds and offsets and copies
  // them to the graph's Philox slots.
  void RefreshPhiloxSlots(CudaGraphReplay& g) const;
  // Compiles the fusion regions for the CUDA backend (Build on CUDA).
  absl::Status BuildCuda();
  // Forms cuda_groups_ from the compiled regions (ProgramOptions::
  // cuda_multi_region), emitted for blocks of `block` threads.
  void GroupCudaRegions(int block);
  std::vector<Tensor> RunCuda(absl::Span<const Tensor> inputs,
                              absl::Span<const Tensor> state) const;
  // Records a run on the program's stream into cuda_graph_ (or clears
  // graphable_ and says why in graph_reason_).
  void Capture(absl::Span<const Tensor> inputs, absl::Span<const Tensor> state) const;
  const ir::Graph* graph_;
  ProgramOptions options_;
  CudaRegionMap cuda_regions_;
  CudaGroupMap cuda_groups_;
  int cuda_region_groups_ = 0, cuda_grouped_regions_ = 0;
  // CUDA graphs: the random nodes in run order, and each distinct traced
  // offset's slot.
  std::vector<const ir::Node*> random_nodes_;
  absl::flat_hash_map<int64_t, int> philox_slots_;
  mutable bool graphable_ = false;
  mutable std::string graph_reason_;
  // The program's CUDA stream and the two events that order it after the
  // caller's stream and the caller's after it; made at the first run,
  // destroyed with the program.
  struct CudaStreamState {
    uintptr_t stream = 0;
    uintptr_t after_caller = 0, after_program = 0;
    CudaStreamState() = default;
    CudaStreamState(CudaStreamState&& o) noexcept
        : stream(std::exchange(o.stream, 0)),
          after_caller(std::exchange(o.after_caller, 0)),
          after_program(std::exchange(o.after_program, 0)) {}
    CudaStreamState& operator=(CudaStreamState&& o) noexcept {
      std::swap(stream, o.stream);
      std::swap(after_caller, o.after_caller);
      std::swap(after_program, o.after_program);
      return *this;
    }
    ~CudaStreamState();
  };
  mutable CudaStreamState stream_;
  mutable int64_t runs_ = 0;
  mutable std::unique_ptr<CudaGraphReplay> cuda_graph_;
  int kernels_per_run_ = 0;
  // Per graph (the top level and each fusion body): for each node position,
  // the value ids read there for the last time.
  absl::flat_hash_map<const ir::Graph*, std::vector<std::vector<int>>> last_uses_;
  RegionMap regions_;
  std::vector<InterpretedRegion> interpreted_;
  int cached_regions_ = 0;
  double codegen_ms_ = 0;
};

// The draws of a replay: each random node takes a fresh slice of the default
// generator's stream under its current seed, in node order, as the eager
// step would have; nodes that shared a traced offset (dropout and its
// backward) share the new one.
class RandomRemap {
 public:
  // (seed, offset) for the draw traced at `traced_offset` of `words` Philox
  // words.
  std::pair<uint64_t, uint64_t> Draw(int64_t traced_offset, int64_t words);
  // `node`'s attributes with the new seed and offset.
  ir::Attrs Apply(const ir::Node& node);

 private:
  absl::flat_hash_map<int64_t, uint64_t> offsets_;
};
// Philox words a random node draws (randn: two per value).
int64_t RandomWords(const ir::Node& node);

// Which body parameter's buffer each return of an elementwise region may be
// written into: the return comes from an update chain that memory planning
// allowed to overwrite that (donated) parameter. -1: a fresh buffer.
std::vector<int> ReturnAliases(const ir::Graph& body);

// A generated region's bound operands: `in` made contiguous, the outputs
// (donated inputs where `return_alias` allows, fresh buffers otherwise), and
// the pointers a launch takes (params, then returns). nullopt when a dtype,
// shape or the device differs from the compiled ones.
struct GeneratedOperands {
  std::vector<void*> ptrs;
  std::vector<Tensor> out;
};
std::optional<GeneratedOperands> BindGenerated(const ir::Graph& body,
                                               const std::vector<int>& return_alias,
                                               Device device, std::vector<Tensor>& in);
// After the launch: bumps the version of each donated input written.
void FinishGenerated(const std::vector<int>& return_alias, const std::vector<Tensor>& in,
                     std::vector<Tensor>& out);

// Runs a compiled region over `ptrs` (one pointer per body param, then per
// return): adds scratch slots and accumulators, runs the scalar part once,
// splits the main loop over the thread pool where the kernel allows, then
// runs the reduced loop.
void RunRegionKernel(const codegen::cpu::RegionKernel& k, std::vector<void*> ptrs);

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_EXECUTOR_H_
