// dce: dead-code elimination over a graph and its fusion bodies.
//
// A node is dead when none of its results is used, transitively: by a later
// node, an assign or the graph's returns. What may go:
//  * op nodes that are kPure (views and random ops included: random ops are
//    pure given their seed/offset attributes) or kInplace (in-place updates
//    are SSA values here; the state they update changes only via assign);
//  * fusion nodes with every result unused (bodies hold no assigns).
// What stays: every assign (a state write-back is the step's side effect),
// op nodes with neither flag, the graph's returns, and a fusion body's
// returns (they are the fusion's results). Dead nodes inside the bodies of
// live fusions are removed too. Counter: "nodes removed" (bodies included).
#ifndef STEPJIT_PASSES_DCE_H_
#define STEPJIT_PASSES_DCE_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

// Returns whether any node was removed.
absl::StatusOr<bool> EliminateDeadCode(ir::Graph& graph, PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_DCE_H_
