// Checks a Graph's invariants: SSA, op arity and types, state writes, fusions.
#ifndef STEPJIT_IR_VERIFIER_H_
#define STEPJIT_IR_VERIFIER_H_

#include "absl/status/status.h"
#include "ir/graph.h"

namespace stepjit::ir {

// OK, or InvalidArgument naming the first offending node as it prints
// ("%5 = add %3, %4: ..."), prefixed by "in fusion @name: " for each fusion
// body it sits in. Checks:
//   * every operand is defined earlier in the same graph or is one of its
//     parameters (a fusion body sees only its own parameters); returns too;
//   * op arity from ir/ops.def, and the declared type equals InferType's;
//   * assign targets are state parameters of the same graph, written with a
//     value of the same type; fusion bodies contain no assign;
//   * fusion inputs/results match the body's parameters/returns in number
//     and type, and bodies verify recursively;
//   * only op nodes carry attributes (the text form has no place for others).
absl::Status Verify(const Graph& graph);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_VERIFIER_H_
