// Float buffers of any float dtype read and written one element at a time
// as double: how the GEMM tests fill their operands and check their results
// against float64 references.
#ifndef STEPJIT_TESTS_UTIL_DTYPE_ELEMENTS_H_
#define STEPJIT_TESTS_UTIL_DTYPE_ELEMENTS_H_

#include <cstdint>
#include <vector>

#include "ir/dtype.h"
#include "runtime/cpu/loops.h"

namespace stepjit::test {

// Element `i` of the `dtype` elements at `p`; f16 and bf16 read back exactly.
inline double LoadElement(const void* p, ir::DType dtype, int64_t i) {
  double v = 0;
  SJ_DISPATCH_FLOAT(
      dtype, "LoadElement",
      v = runtime::cpu::Convert<double>(static_cast<const T*>(p)[i]));
  return v;
}

// Stores `v` rounded to `dtype` as element `i` at `p`.
inline void StoreElement(void* p, ir::DType dtype, int64_t i, double v) {
  SJ_DISPATCH_FLOAT(dtype, "StoreElement",
                    static_cast<T*>(p)[i] = runtime::cpu::Convert<T>(v));
}

// `n` elements of `dtype`, zeroed; Get returns what a kernel sees of Set's
// value (rounded to the dtype).
class DTypeBuffer {
 public:
  DTypeBuffer(ir::DType dtype, int64_t n)
      : dtype_(dtype), bytes_(n * ir::DTypeSize(dtype)) {}
  void* data() { return bytes_.data(); }
  void Set(int64_t i, double v) { StoreElement(bytes_.data(), dtype_, i, v); }
  double Get(int64_t i) const { return LoadElement(bytes_.data(), dtype_, i); }

 private:
  ir::DType dtype_;
  std::vector<uint8_t> bytes_;
};

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_DTYPE_ELEMENTS_H_
