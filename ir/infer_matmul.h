// Type rules of matmul and its GEMM epilogues, for ir/infer.cc.
#ifndef STEPJIT_IR_INFER_MATMUL_H_
#define STEPJIT_IR_INFER_MATMUL_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/infer.h"

namespace stepjit::ir {

// InvalidArgument "op(f32[2, 3], f32[3]): problem" (defined in infer.cc).
absl::Status InvalidInputs(OpId op, absl::Span<const TensorType> in,
                           absl::string_view problem);

// The product's type, after checking the operands and the `epilogue` attr
// (a mark with two operands, the absorbed bias with a third).
absl::StatusOr<TensorType> InferMatmul(absl::Span<const TensorType> in,
                                       const Attrs& attrs);

// The type of an `epilogue = "bgrad"` matmul's second result, its bias
// gradient: one value per row of the 2-D product, in the operands' dtype.
absl::StatusOr<TensorType> InferMatmulBiasGrad(absl::Span<const TensorType> in,
                                               const Attrs& attrs);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_INFER_MATMUL_H_
