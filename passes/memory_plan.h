// memory-plan: liveness-based buffer planning; decides which in-place updates
// may overwrite their input and reports the planned peak bytes.
//
// Values are SSA; a node's output normally gets a fresh buffer. Views alias
// their input's buffer. An in-place update (kInplace) or a fusion region may
// instead write into its first input's buffer B (attribute `in_place = true`
// on the update node) when all of these hold:
//  - B is writable here: a state parameter's buffer at the top level (the
//    step writes state back anyway), or a region parameter that the
//    enclosing graph donated; never a step input's buffer;
//  - no node after this one reads any value that lives in B (views of it
//    included), and no value in B is returned. The `assign` to B's own state
//    parameter does not count: it writes B, it does not read it.
// Otherwise the executor copies the input first (`in_place = false`), so
// the IR's value semantics hold whatever order fusion chose. Buffers of
// intermediates are released after their last use; the planned peak is the
// largest sum of live intermediate bytes (parameters excluded), counting
// each region's own temporaries while it runs.
#ifndef STEPJIT_PASSES_MEMORY_PLAN_H_
#define STEPJIT_PASSES_MEMORY_PLAN_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

struct MemoryPlanStats {
  int64_t planned_peak_bytes = 0;
  int in_place = 0;      // updates that overwrite their input
  int copies = 0;        // updates that must copy their input first
  int64_t bytes_saved = 0;  // bytes not allocated thanks to in-place updates
};

// Annotates every in-place update node (recursively) with `in_place`.
// Returns whether any attribute changed.
absl::StatusOr<bool> PlanMemory(ir::Graph& graph, MemoryPlanStats* stats);
// The pipeline entry ("memory-plan") and its counters.
inline constexpr Statistic kPlannedPeakBytes{"memory-plan",
                                             "planned peak bytes"};
inline constexpr Statistic kInPlaceUpdates{"memory-plan", "in-place updates"};
inline constexpr Statistic kCopiedUpdates{"memory-plan", "copied updates"};
inline constexpr Statistic kBytesSaved{"memory-plan", "bytes saved"};
absl::StatusOr<bool> PlanMemoryPass(ir::Graph& graph, PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_MEMORY_PLAN_H_
