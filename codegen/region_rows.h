// The row plan's analysis (codegen/region_plan.h describes the plan).
#ifndef STEPJIT_CODEGEN_REGION_ROWS_H_
#define STEPJIT_CODEGEN_REGION_ROWS_H_

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "codegen/region_plan.h"
#include "ir/graph.h"

namespace stepjit::codegen {

// A row plan for `body`, which holds no row ops (they are expanded first).
absl::StatusOr<Plan> AnalyzeRows(const ir::Graph& body,
                                 const AnalyzeOptions& options);

// What one pass over a row of a row plan computes: phase `phase`'s
// reductions, the full-domain nodes feeding them (phase > plan.row_phases:
// the final pass, no reductions, feeding the full-size returns), and every
// value those nodes and the pass's roots read. Both code generators lower a
// pass from this.
struct RowPassWork {
  std::vector<const ir::Node*> reductions;  // in body order
  absl::flat_hash_set<const ir::Node*> nodes;
  absl::flat_hash_set<const ir::Value*> read;
};
RowPassWork RowPass(const ir::Graph& body, const Plan& plan, int phase);

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_REGION_ROWS_H_
