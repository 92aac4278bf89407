// Shape helpers.
#include "ir/shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"

namespace stepjit::ir {

bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}

bool CheckedAdd(int64_t a, int64_t b, int64_t* out) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}

absl::StatusOr<int64_t> CheckedNumElements(ShapeRef shape) {
  int64_t n = 1;
  bool too_many = false;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape ", ShapeToString(shape), " has a negative size ", d));
    }
  }
  // The non-zero dims must multiply to at most 2^56 even when another dim
  // is 0: strides, views and reshapes of an empty tensor use them.
  bool empty = false;
  for (int64_t d : shape) {
    if (d == 0) {
      empty = true;
      continue;
    }
    if (!too_many && (!CheckedMul(n, d, &n) || n > kMaxNumElements))
      too_many = true;
  }
  if (too_many) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", ShapeToString(shape),
        empty ? " has a 0 dim, but its other dims multiply to more than 2^56 "
                "(the most elements a tensor may have; strides of an empty "
                "tensor are sized by them too)"
              : " has more than 2^56 elements (the most a tensor may have)"));
  }
  return empty ? 0 : n;
}

absl::Status ValidateShape(ShapeRef shape) {
  return CheckedNumElements(shape).status();
}

int64_t NumElements(ShapeRef shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    SJ_CHECK(CheckedMul(n, d, &n), "element count of ", ShapeToString(shape),
             " overflows int64: an unvalidated shape");
  }
  return n;
}

Shape ContiguousStrides(ShapeRef shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    SJ_CHECK(CheckedMul(s, shape[i] > 0 ? shape[i] : 1, &s), "strides of ",
             ShapeToString(shape), " overflow int64: an unvalidated shape");
  }
  return strides;
}

std::string ShapeToString(ShapeRef shape) {
  return "[" + absl::StrJoin(shape, ", ") + "]";
}

int64_t WrapDim(int64_t dim, int64_t rank) {
  int64_t r = rank == 0 ? 1 : rank;  // a 0-d tensor accepts dim 0 and -1
  if (dim < -r || dim >= r) return -1;
  return dim < 0 ? dim + r : dim;
}

}  // namespace stepjit::ir
