// Shapes and strides: small inline vectors plus the helpers every layer needs.
#ifndef STEPJIT_IR_SHAPE_H_
#define STEPJIT_IR_SHAPE_H_

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"

namespace stepjit::ir {

using Shape = absl::InlinedVector<int64_t, 6>;
using ShapeRef = absl::Span<const int64_t>;

int64_t NumElements(ShapeRef shape);
Shape ContiguousStrides(ShapeRef shape);
// "[128, 784]"
std::string ShapeToString(ShapeRef shape);
// Wraps a possibly negative dim into [0, rank); nullopt-like -1 when out of range.
int64_t WrapDim(int64_t dim, int64_t rank);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_SHAPE_H_
