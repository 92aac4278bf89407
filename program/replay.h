// The device-neutral replay loop: runs a graph's nodes over bound tensors,
// fusion regions through a region backend (program/region_backend.h)
// or interpreted, every op through its launch, resolved when the program was
// built (PrepareLaunches).
#ifndef STEPJIT_PROGRAM_REPLAY_H_
#define STEPJIT_PROGRAM_REPLAY_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "ir/graph.h"
#include "program/random_layout.h"
#include "program/region_backend.h"
#include "program/region_check.h"
#include "runtime/dispatch.h"
#include "runtime/tensor.h"

namespace stepjit::runtime {

// What the replay loop runs at each node position of one graph (the top
// level or a fusion body), resolved once when the program is built: the op
// node's launch (runtime/dispatch.h PreparedOp; nullopt for fusion and
// assign nodes), so the loop never calls Dispatch, and the value ids read
// there for the last time, which the loop drops so that buffers free early.
struct GraphLaunches {
  std::vector<std::optional<PreparedOp>> ops;
  std::vector<std::vector<int>> last_uses;
};
using LaunchList = absl::flat_hash_map<const ir::Graph*, GraphLaunches>;
LaunchList PrepareLaunches(const ir::Graph& g, Device device);

// One launch per op and per fusion region; views launch nothing.
int CountKernels(const ir::Graph& g);

// The top-level fusion nodes that run as generated code.
using CompiledRegions =
    absl::flat_hash_map<const ir::Node*, std::unique_ptr<CompiledRegion>>;

// What the loop runs: all of it outlives the run.
struct ReplayPlan {
  const ir::Graph* graph = nullptr;
  const LaunchList* launches = nullptr;
  const CompiledRegions* regions = nullptr;
  RegionBackend* backend = nullptr;
  // Where the program runs (the profiler asks the device's timer).
  Device device = Device::cpu();
  RandomLayout random_layout;  // the graph's draws (LayoutOf)
};

// Binds `inputs` and `state` to the graph's input and state params (each in
// param order; a graph with a random param takes its state as the last
// input, which Program::Run makes), runs every node with autograd off, and
// returns the graph's returns. With `checker` (Program::RunChecked) every
// region that runs as generated code also runs interpreted on copies of its
// operands, and the two are compared.
std::vector<Tensor> RunReplay(const ReplayPlan& plan,
                              absl::Span<const Tensor> inputs,
                              absl::Span<const Tensor> state,
                              const RunHooks& hooks,
                              RegionChecker* checker = nullptr);

}  // namespace stepjit::runtime

#endif  // STEPJIT_PROGRAM_REPLAY_H_
