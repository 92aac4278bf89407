// canonicalize: local rewrites to a simpler equivalent form, applied in one
// forward walk.
//
// Rules, each with its counter:
//  "constants folded"   An elementwise op whose inputs are all 0-d `full`
//      nodes becomes a 0-d `full` of its result, computed exactly as the eager
//      CPU kernel would: the same ir::ScalarDef over the dtype's arithmetic
//      type (float for f32/f16/bf16, double for f64, int64 for integers),
//      the same operand conversions and rounding to the storage type, so the
//      value is bit-identical. Not folded: results that are NaN (the text form
//      keeps no NaN sign or payload), i64 results beyond 2^53 (`value` is a
//      double), and anything eager computes with undefined behaviour (i64
//      overflow, float to integer out of range).
//  "casts removed"      cast to the input's own dtype -> the input.
//  "cast pairs removed" cast(cast(x: A) to B) to A -> x when B holds every
//      value of A: f16/bf16 -> f32/f64, f32 -> f64, i32 -> i64/f64, bool ->
//      any (NaNs stay NaN; a signalling NaN's payload may come back quieted).
//      f32 -> f16 -> f32, f32 -> bf16 and i64 -> f64 round and never qualify.
//  "identities removed" x*1, 1*x, x+0, 0+x, x-0, x/1 -> x, where the constant
//      is a 0-d `full` whose value, converted to the op's computation dtype,
//      is exactly 1 or 0, and the result's type (dtype and shape) equals x's:
//      a product that broadcasts x or promotes its dtype is kept. x+0 for
//      x = -0.0 gives +0.0 in IEEE arithmetic; like XLA's and Inductor's
//      simplifiers this rule treats the two zeros as the same value.
//  "permutes combined"  permute(permute(x, p), q) -> permute(x, p[q]);
//  "permutes removed"   a permute that is the identity -> its input.
//  "reshapes combined"  reshape(reshape(x)) -> reshape(x) (views are pure);
//  "reshapes removed"   a reshape to its input's shape -> its input.
//  "slice gradients joined" a sum of slice_backward results (step 1, one
//      dim) whose windows are adjacent, plus at most one other term, each
//      summand used once -> one slice_backward of their cat (the cat alone
//      when the windows tile the dim), plus the other term: autograd's sum
//      of the q, k and v gradients of one QKV product, without zero-filled
//      tensors. Exact: each element adds at most one non-zero term (a -0.0
//      gradient may come out as -0.0 instead of +0.0). Counts the summands.
// Nodes left without uses stay for dce. Fusion bodies are canonicalized too.
#ifndef STEPJIT_PASSES_CANONICALIZE_H_
#define STEPJIT_PASSES_CANONICALIZE_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

// Returns whether any rule fired.
absl::StatusOr<bool> Canonicalize(ir::Graph& graph, PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_CANONICALIZE_H_
