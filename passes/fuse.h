// fuse: groups elementwise chains, reductions with their prologue/epilogue, and
// optimizer updates into fusion regions; absorbs GEMM epilogues.
//
// Legality rules (each has a "must not fuse" FileCheck case in
// tests/ir/fuse.ir):
//  R1 Kinds. Only elementwise ops, in-place updates (values in SSA), the
//     reductions sum/mean/amax/var, row-wise normalizations and losses, and
//     order-preserving views (reshape, squeeze, unsqueeze) join regions.
//     matmul, embedding, random ops, factories, argmax, permute/expand/slice
//     and copies stay standalone. 0-d `full` constants are copied into each
//     region that reads them: they are free, so copying duplicates no work.
//  R2 One iteration space. Every member iterates over the same number of
//     elements (a reduction iterates over its input), except 0-d scalar work
//     and a reduction's epilogue; regions with different sizes stay apart.
//  R3 One reduction per region, and members that consume it must have its
//     output size (a second pass over the input would not be one kernel);
//     or a row region: reductions that all reduce the same trailing "rows"
//     of the region's size (ir::RowExtentOf: softmax, log_softmax,
//     layer_norm, cross_entropy, and sum/mean/amax/var over trailing dims),
//     with work over the full size that reads their results broadcast back
//     over the rows (softmax and layer_norm backward), per-row and 0-d work;
//     at least two rows. The row plan runs a row's phases back to back
//     (codegen/region_plan.h).
//  R4 No cycles: two groups never merge when a path leaves one and re-enters
//     the other through a node outside both.
//  R5 No duplicated work: a member whose value is needed outside the region
//     becomes an extra region output instead of being recomputed.
//  R6 State writes keep their order: assigns are never fused and stay after
//     every region; in-place updates are ordinary SSA values here, and the
//     memory planner decides later whether they may overwrite their input.
// GEMM epilogues (passes/gemm_epilogue.h): before grouping, a matmul whose
// only consumer adds a bias vector (then optionally relu/gelu/gelu_tanh) is
// marked `epilogue = "bias[,relu|gelu|gelu_tanh]"`, a weight-gradient matmul
// beside a bias-gradient sum `epilogue = "bgrad"`; after outlining, a marked
// matmul takes the bias as a third operand and the activation into its
// `epilogue` (act(op(a) op(b) + bias), run by the GEMM library), and the add
// and activation leave the region that consumed it. The "bgrad" mark is
// acted on by the gemm-bgrad pass (passes/gemm_bgrad.h), run after fuse for
// CUDA steps.
#ifndef STEPJIT_PASSES_FUSE_H_
#define STEPJIT_PASSES_FUSE_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

struct FuseStats {
  int regions = 0;        // fusion nodes created
  int nodes_fused = 0;    // ops moved into regions (constants excluded)
  int epilogues = 0;      // matmuls marked with an absorbable epilogue
  int absorbed = 0;       // matmuls that took their bias (and activation) in
};

// Returns whether the graph changed.
absl::StatusOr<bool> FuseGraph(ir::Graph& graph, FuseStats* stats);
// The pipeline entry ("fuse"): counters "regions formed", "nodes fused",
// "gemm epilogues marked", "gemm epilogues absorbed".
absl::StatusOr<bool> Fuse(ir::Graph& graph, PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_FUSE_H_
