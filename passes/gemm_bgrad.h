// gemm-bgrad: a weight gradient's bias-gradient sum moves into its GEMM call
// (cuBLASLt's BGRADB epilogue on CUDA).
//
// Runs after fuse, which marks a transposed-A matmul whose left operand is
// also summed over dim 0 with `epilogue = "bgrad"`. Such a 2-D matmul
//   %w = matmul %dy, %x {transpose_a = true, epilogue = "bgrad"} : f32[m,n]
// and a `sum %dy` over its k dim (dims = [0] with transpose_a, [1] without;
// keepdim or not) of the matmul's dtype become
//   %w = matmul %dy, %x {transpose_a = true, epilogue = "bgrad"}
//        : (f32[m,n], f32[m])
// (ir/ops.def) and the sum's users read %w#1 (through `reshape` to the
// keepdim shape for a keepdim sum). The sum may stand alone, or be the
// reduction of a fusion region that reads %dy as a parameter or computes and
// returns it. Such a region is split: its members that do not depend on the
// sum stay where it was, as an elementwise region (none if nothing of it is
// needed); the members after the sum (its epilogue, such as an optimizer's
// lerp_ of the bias gradient) form a new region `@<name>_post` after the
// matmul, reading %w#1 (a reshape of the sum to [m] becomes %w#1 itself).
// 0-d constants are copied into both; other values the second part reads
// from the first become results of the first. Nodes move only as far as
// their operands require; assigns stay last, in order.
//
// Left as they are: a sum of another value (a cast of %dy, as autocast
// inserts), of another dtype or over other dims, a batched product, a
// matmul without the mark or already absorbed, and a sum the matmul itself
// depends on (absorbing it would make a cycle).
#ifndef STEPJIT_PASSES_GEMM_BGRAD_H_
#define STEPJIT_PASSES_GEMM_BGRAD_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

// Returns the number of matmuls that absorbed a bias-gradient sum.
int AbsorbGemmBiasGrads(ir::Graph& graph);

// The pipeline entry ("gemm-bgrad"): counter "gemm bias-gradients absorbed".
absl::StatusOr<bool> GemmBiasGradPass(ir::Graph& graph, PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_GEMM_BGRAD_H_
