// Shape and dtype inference for every op: shared by eager dispatch and the IR verifier.
#ifndef STEPJIT_IR_INFER_H_
#define STEPJIT_IR_INFER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/op.h"
#include "ir/shape.h"

namespace stepjit::ir {

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;
  bool operator==(const TensorType&) const = default;
};

// The output type of `op` applied to inputs of the given types, or an
// InvalidArgument error naming the op, the inputs' shapes/dtypes and the rule.
absl::StatusOr<TensorType> InferType(OpId op, absl::Span<const TensorType> inputs,
                                     const Attrs& attrs);
// The types of all `num_results` results of a node: InferType's first, then
// the further results ir/ops.def allows (only a matmul's bias gradient);
// an error names the op, the inputs and what the results should be.
absl::StatusOr<std::vector<TensorType>> InferTypes(
    OpId op, absl::Span<const TensorType> inputs, const Attrs& attrs,
    int num_results);

// NumPy broadcasting of two shapes; the error names both.
absl::StatusOr<Shape> BroadcastShapes(ShapeRef a, ShapeRef b);

// Result dtype of an elementwise op over these inputs (0-d inputs only widen
// across categories, as PyTorch's wrapped numbers do).
DType ResultType(absl::Span<const TensorType> inputs);

// Normalizes reduction dims (empty = all); error on out-of-range/duplicates.
absl::StatusOr<std::vector<int64_t>> NormalizeDims(std::vector<int64_t> dims,
                                                   int64_t rank);

// Resolves one -1 entry in a reshape target for `numel` elements.
absl::StatusOr<Shape> InferReshape(ShapeRef from, std::vector<int64_t> to);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_INFER_H_
