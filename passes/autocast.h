// autocast-bf16 / autocast-f16: casts inserted into a traced f32 step by the op
// table's AmpPolicy.
//
// Run before canonicalize, with PyTorch AMP's semantics: parameters and
// their grads stay f32, every reader of a gradient sees the f32 value
// (gradients as passes/amp_graph.h finds them).
//
// Inserts casts by the op table's AmpPolicy,
// as eager amp::Autocast would have: kLower ops (matmuls, forward and
// backward) read low-precision copies of their f32 inputs (one cast per
// value, so a weight is cast once per step however often it is used);
// kFp32 ops (exp, log, pow, softmax, sums, norms, losses) read f32. Output
// types are re-inferred down the graph (promotion widens mixed inputs
// again). A gradient computed in low precision (a weight's, by a backward
// matmul) is cast back to its leaf's dtype right where it is computed, as
// the backward of eager autocast's cast gives it, and every reader uses
// that copy. State write-backs and the other returns (the loss) are cast
// back to their traced dtypes.
#ifndef STEPJIT_PASSES_AUTOCAST_H_
#define STEPJIT_PASSES_AUTOCAST_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

absl::StatusOr<bool> AutocastGraph(ir::Graph& graph, ir::DType low,
                                   PassStats& stats);
absl::StatusOr<bool> AutocastBf16(ir::Graph& graph, PassStats& stats);
absl::StatusOr<bool> AutocastF16(ir::Graph& graph, PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_AUTOCAST_H_
