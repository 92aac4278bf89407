// cse: common-subexpression elimination by hash-consing pure op nodes.
//
// Two op nodes are the same expression when they apply the same op to the
// same input values with equal attributes (doubles compared bit for bit, so
// 0.0 and -0.0 differ; attribute order does not matter) and declare the same
// result type. For a kCommutative op with two inputs the operand order is
// normalized first. Only kPure ops merge: in-place updates (kInplace) may
// reuse their first input's buffer at run time, so two of them are never one
// value; assigns and fusion nodes are left alone. The later duplicate's uses
// (node inputs, assign operands, returns) are redirected to the earlier node
// and the duplicate is erased. Each fusion body is processed on its own.
// A merge can keep a value alive past an in-place update that consumes it;
// that is sound because memory-plan grants buffer reuse by liveness only.
// Counter: "nodes merged".
#ifndef STEPJIT_PASSES_CSE_H_
#define STEPJIT_PASSES_CSE_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

// Returns whether any node was merged away.
absl::StatusOr<bool> EliminateCommonSubexpressions(ir::Graph& graph,
                                                   PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_CSE_H_
