// Shape helpers.
#include "ir/shape.h"

#include "absl/strings/str_join.h"

namespace stepjit::ir {

int64_t NumElements(ShapeRef shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape ContiguousStrides(ShapeRef shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;
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
