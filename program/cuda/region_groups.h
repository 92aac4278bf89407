// Multi-region launches on CUDA: runs of consecutive, independent fusion
// regions launched together as one multi-region kernel per phase
// (codegen/cuda/multi_region.h), e.g. the per-parameter optimizer updates at
// the end of a training step.
#ifndef STEPJIT_PROGRAM_CUDA_REGION_GROUPS_H_
#define STEPJIT_PROGRAM_CUDA_REGION_GROUPS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "codegen/cuda/cuda_emitter.h"
#include "ir/graph.h"
#include "program/cuda/cuda_region.h"
#include "runtime/tensor.h"

namespace stepjit::runtime::cuda {

// The maximal runs of consecutive top-level nodes of `g` in which every node
// is a region of `arg_bytes` (one the device compiled, with the kernel
// argument bytes it takes), no member reads a value an earlier member of the
// run produces, and the members' bytes add up to at most `max_arg_bytes`. A
// node that breaks a rule ends the run (and starts the next when it is a
// region). Runs of fewer than two regions are left out.
//
// Values are SSA here, so buffers shared through in-place updates or views
// are not visible: LaunchRegionGroup checks storage when it runs a group,
// and the members launch one by one when one writes a buffer another uses.
std::vector<std::vector<const ir::Node*>> IndependentRegionRuns(
    const ir::Graph& g,
    const absl::flat_hash_map<const ir::Node*, int64_t>& arg_bytes,
    int64_t max_arg_bytes);

// Regions launched together as one multi-region kernel per phase.
struct RegionGroup {
  std::vector<const ir::Node*> members;    // consecutive in the graph
  std::vector<const CudaRegion*> regions;  // each member's own region
  std::shared_ptr<const LoadedRegion> module;
  std::vector<codegen::cuda::RegionSource> layouts;  // as emitted for module
};

// The groups of `graph`'s regions in `compiled`, emitted for blocks of
// `block` threads; a group that does not build leaves its members to launch
// alone. With `dump_dir`, each group's CUDA C (and PTX for a non-empty
// `ptx_arch`) is written beside the regions'.
std::vector<std::shared_ptr<const RegionGroup>> BuildRegionGroups(
    const ir::Graph& graph, const CudaRegions& compiled, int block,
    const std::string& dump_dir, const std::string& ptx_arch);

// Launches `group` on the current stream over each member's operands (`ins`,
// made contiguous where needed) and returns each member's results; nullopt
// (nothing launched) when a member's operands differ from the compiled ones
// or members share a written buffer.
std::optional<std::vector<std::vector<Tensor>>> LaunchRegionGroup(
    const RegionGroup& group, std::vector<std::vector<Tensor>>& ins);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_PROGRAM_CUDA_REGION_GROUPS_H_
