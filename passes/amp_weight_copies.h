// amp-weight-copies: the low-precision copy of a weight that autocast reads is
// kept between steps as compiler state and rewritten by the step that updates
// the weight, instead of being cast from the f32 weight at every step.
//
// Run after autocast-* (and grad-scaler, whose predicated write-backs it
// reads), before canonicalize. For each f32 state param %W that the step
// casts to bf16 or f16 (`cast %W {dtype = bf16}`, a weight autocast lowered
// for a matmul), the pass adds the state param %W.as_bf16 of that type and
// every reader of the cast reads it instead. Where the step writes %W back
// (`assign %W, %v`), it also writes `copy_ %W.as_bf16, %v` back to the copy:
// fuse puts that conversion into the region that computes %v (the
// optimizer's update), so the new weight is converted while it is in
// registers, and no kernel of the step reads the f32 weight just to cast it.
// A weight the step never writes (frozen) is converted by no kernel at all.
//
// The copy equals cast(%W) at the start of every step, so results are bit
// for bit those of the per-step cast. The caller keeps it so: it binds each
// `<state>.as_<dtype>` param to a tensor of its own and converts the state
// tensor into it before a run whenever the state tensor was written outside
// the compiled step (its storage's version counter moved since the last
// replay: an eager call, a checkpoint load, a user's copy_), and before the
// first. STEPJIT_DISABLE=amp-weight-copies turns it off.
#ifndef STEPJIT_PASSES_AMP_WEIGHT_COPIES_H_
#define STEPJIT_PASSES_AMP_WEIGHT_COPIES_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

// Counter: "weight copies kept".
absl::StatusOr<bool> AmpWeightCopies(ir::Graph& graph, PassStats& stats);

// The name of the param holding `state`'s copy in `dtype`:
// "<state>.as_<dtype>".
std::string WeightCopyName(absl::string_view state, ir::DType dtype);

// For a param named by WeightCopyName: the state's name and the dtype.
struct WeightCopyOf {
  std::string state;
  ir::DType dtype;
};
std::optional<WeightCopyOf> ParseWeightCopyName(absl::string_view name);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_AMP_WEIGHT_COPIES_H_
