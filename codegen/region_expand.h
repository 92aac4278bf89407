// Row ops of a fusion region written as primitive row steps, so that the
// region analysis (codegen/region_plan.h) and the code generators see only
// elementwise ops, order-preserving views and the reductions sum, mean and
// amax (plus `arange`, the column index a cross_entropy target picks).
#ifndef STEPJIT_CODEGEN_REGION_EXPAND_H_
#define STEPJIT_CODEGEN_REGION_EXPAND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace stepjit::codegen {

// Whether `op` is one ExpandRowOps rewrites: the ops the table marks
// kRowReduction (ir/ops.def), each of which has its expansion here.
bool IsRowOp(ir::OpId op);

// The role (ir::AttrKey::kRole) of the 0-d `full` constants an expansion
// makes from the body's sizes (a row length, a row count, a variance's
// count less its correction): their value is a count of elements.
inline constexpr char kSizeRole[] = "size";

// A copy of `body` (the same params in order, the same returns) in which
// softmax, log_softmax, layer_norm, var, cross_entropy and mse_loss are
// replaced by the arithmetic of their eager kernels (devices/cpu/
// nn_kernels.cc and reduce.cc), in the same precisions: softmax's exp in
// f32 (f64 for f64) with an f64 sum; layer_norm, var and the losses in f64.
// Unimplemented for a form the row plan does not take (softmax over a
// non-last dim, var over non-trailing dims).
//
// One difference: an out-of-range cross_entropy target, which the eager
// kernel refuses with an error, gives a NaN loss for its row.
absl::StatusOr<std::unique_ptr<ir::Graph>> ExpandRowOps(const ir::Graph& body);

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_REGION_EXPAND_H_
