// sink-regions: moves fusion regions down, next to the region that first
// reads them, so that independent regions end up side by side and can launch
// together on CUDA (program/cuda/region_groups.h). With loss scaling
// the per-gradient inf checks are each computed right after their gradient's
// matmul; sunk, they sit together before the scaler update that reads them
// all.
//
// A region moves when the first node that reads one of its results is a
// region (not an op, not an assign: state writes stay after every region,
// R6 of passes/fuse.h), to just before that user and the regions already
// right before it, and only when the move extends the lifetime of at most
// kSinkSlackBytes of its operands: an operand read again at or after the
// user, or a graph parameter, costs nothing; others (a small bias gradient
// read only by the check) count their bytes. Regions are visited from last to
// first, so a region can follow a user that moved before it; regions sunk to
// the same place keep their order. Runs before memory-plan, which decides
// in-place updates in the final order. Counter: "regions sunk".
#ifndef STEPJIT_PASSES_SINK_REGIONS_H_
#define STEPJIT_PASSES_SINK_REGIONS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

inline constexpr int64_t kSinkSlackBytes = 64 * 1024;

// Returns whether any region moved.
absl::StatusOr<bool> SinkRegions(ir::Graph& graph, PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_SINK_REGIONS_H_
