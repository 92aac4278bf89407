// Shapes and strides: small inline vectors plus the helpers every layer needs.
#ifndef STEPJIT_IR_SHAPE_H_
#define STEPJIT_IR_SHAPE_H_

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace stepjit::ir {

using Shape = absl::InlinedVector<int64_t, 6>;
using ShapeRef = absl::Span<const int64_t>;

// The most elements a tensor may have: 2^56, so that its size in bytes (8
// per element at most) rounded up by an allocator, every stride and every
// offset into it fit in int64 with room to spare.
inline constexpr int64_t kMaxNumElements = int64_t{1} << 56;

// Checked int64 arithmetic, the one helper for sizes, strides, element and
// byte counts: false (and *out untouched) when the result overflows.
bool CheckedMul(int64_t a, int64_t b, int64_t* out);
bool CheckedAdd(int64_t a, int64_t b, int64_t* out);

// The element count of a valid tensor shape: every dim >= 0 and at most
// kMaxNumElements elements (dims multiplied with overflow checks); else
// InvalidArgument naming the shape and what is wrong with it.
absl::StatusOr<int64_t> CheckedNumElements(ShapeRef shape);
absl::Status ValidateShape(ShapeRef shape);

// The element count of a shape that passed ValidateShape (every entry point
// checks: the IR parser, type inference, tensor factories). A product that
// overflows is a bug, not a user error: it aborts rather than wrap.
int64_t NumElements(ShapeRef shape);
Shape ContiguousStrides(ShapeRef shape);
// "[128, 784]"
std::string ShapeToString(ShapeRef shape);
// Wraps a possibly negative dim into [0, rank); nullopt-like -1 when out of range.
int64_t WrapDim(int64_t dim, int64_t rank);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_SHAPE_H_
