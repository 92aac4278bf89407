// Horizontal fusion on CUDA: the kernels of several independent fusion
// regions (a training step's per-parameter optimizer updates, the grad
// scaler's per-gradient checks) as one launch per phase.
//
// Every member region is emitted as `__device__` functions (cuda_emitter.h,
// EmitOptions::device_functions). Each phase (scalar, main, reduced) that
// any member has becomes one `__global__` kernel over virtual blocks: blocks
// [first_i, first_i + grid_i) run member i's kernel of that phase with
// sj_bid = block - first_i and sj_grid = grid_i, exactly the grid it would
// have had alone. The virtual blocks are walked with a grid-stride loop, so
// a backend that caps the grid still runs every one. Phases launch in the
// order scalar, main, reduced, so each member's kernels keep their order;
// members run concurrently within a phase, which is why they must be
// independent: no member may read a buffer another member writes (the
// caller checks this; program/cuda/region_groups.h).
//
// Every phase kernel takes all members' arguments (RegionSource::params),
// member after member, so one argument list serves every launch.
#ifndef STEPJIT_CODEGEN_CUDA_MULTI_REGION_H_
#define STEPJIT_CODEGEN_CUDA_MULTI_REGION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codegen/cuda/cuda_emitter.h"
#include "ir/graph.h"

namespace stepjit::codegen::cuda {

// CUDA's limit on a kernel's parameter bytes is 4 KiB (before CUDA 12.1 and
// on older devices); groups stay under it with a margin.
inline constexpr int64_t kMaxMultiArgBytes = 4000;

// Bytes of arguments `region` adds to a multi-region kernel (one pointer per
// parameter).
inline int64_t MultiArgBytes(const RegionSource& region) {
  return static_cast<int64_t>(region.params.size() * sizeof(void*));
}

struct MultiRegionSource {
  // The module: its name, source, helpers, and the phase kernels in launch
  // order, each with the total number of virtual blocks as its grid. The
  // per-region layout fields (numel, slots, partials) are unused.
  RegionSource combined;
  // The members as emitted for it, in order: the scratch slots and
  // reduction partials each launch must supply.
  std::vector<RegionSource> members;
};

// Emits `bodies` (at least two) as one multi-region module. Unimplemented
// when a body cannot be lowered (as for EmitRegion); InvalidArgument when
// the members' arguments exceed kMaxMultiArgBytes.
absl::StatusOr<MultiRegionSource> EmitMultiRegion(
    absl::Span<const ir::Graph* const> bodies, const EmitOptions& options = {});

}  // namespace stepjit::codegen::cuda

#endif  // STEPJIT_CODEGEN_CUDA_MULTI_REGION_H_
