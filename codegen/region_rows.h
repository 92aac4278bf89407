// The row plan's analysis (codegen/region_plan.h describes the plan).
#ifndef STEPJIT_CODEGEN_REGION_ROWS_H_
#define STEPJIT_CODEGEN_REGION_ROWS_H_

#include "absl/status/statusor.h"
#include "codegen/region_plan.h"
#include "ir/graph.h"

namespace stepjit::codegen {

// A row plan for `body`, which holds no row ops (they are expanded first).
absl::StatusOr<Plan> AnalyzeRows(const ir::Graph& body,
                                 const AnalyzeOptions& options);

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_REGION_ROWS_H_
