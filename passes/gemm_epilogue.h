// GEMM epilogues for the fuse pass: marks what may follow a matmul, then
// moves a bias add and activation into the matmul's GEMM library call.
//
// Marking (before regions form): a 2-operand matmul whose only consumer adds
// a 1-D bias of its last dim (then optionally an activation: an op the table
// marks kGemmActivation) gets `epilogue = "bias[,<act>]"` (ir/gemm_epilogue.h
// types it); a transposed-A matmul (a weight gradient) whose left operand is
// also summed over dim 0 (the bias gradient) gets `epilogue = "bgrad"` (which
// the gemm-bgrad pass, passes/gemm_bgrad.h, may act on). A mark changes nothing
// by itself.
//
// Absorbing (after regions form): a matmul marked "bias..." whose only user
// is one region whose body reads the matmul's parameter only in
// `add(<matmul param>, <bias param>)` becomes
//   matmul %a, %b, %bias {epilogue = "bias[,act]"}
// (act(op(a) op(b) + bias), ir/ops.def) when the add, and the activation if
// it is the add's only user, keep the matmul's type. In the body the add (and
// activation) go away, their uses read the matmul's parameter instead, which
// now carries the activated value; a region result that becomes a bare
// parameter is dropped and its users read the outer value; a parameter no
// longer read is dropped; a region left with no results is removed. A bias
// add left standalone (in no region) is absorbed the same way. The bias must
// be defined before the matmul; anything else is left as it was.
#ifndef STEPJIT_PASSES_GEMM_EPILOGUE_H_
#define STEPJIT_PASSES_GEMM_EPILOGUE_H_

#include "ir/graph.h"

namespace stepjit::passes {

// Returns the number of matmuls whose mark changed.
int MarkGemmEpilogues(ir::Graph& graph);
// Returns the number of matmuls that absorbed a bias (and activation).
int AbsorbGemmEpilogues(ir::Graph& graph);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_GEMM_EPILOGUE_H_
