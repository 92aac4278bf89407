// Tensor types for graphs the IR tests build through the API.
#ifndef STEPJIT_TESTS_UTIL_IR_TYPES_H_
#define STEPJIT_TESTS_UTIL_IR_TYPES_H_

#include <cstdint>
#include <initializer_list>

#include "ir/graph.h"

namespace stepjit::test {

// An f32 tensor type of the given dims. Built in place: returning a moved
// empty Shape trips a GCC 12 -Wmaybe-uninitialized false positive inside
// absl::InlinedVector.
inline ir::TensorType F32(std::initializer_list<int64_t> dims) {
  ir::TensorType type;
  type.shape.assign(dims.begin(), dims.end());
  return type;
}

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_IR_TYPES_H_
