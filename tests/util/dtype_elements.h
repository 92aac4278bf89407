// Float buffers of any float dtype read and written one element at a time
// as double, and the tolerance of a GEMM's result: how the GEMM tests fill
// their operands and check their results against float64 references.
#ifndef STEPJIT_TESTS_UTIL_DTYPE_ELEMENTS_H_
#define STEPJIT_TESTS_UTIL_DTYPE_ELEMENTS_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "devices/cpu/gemm.h"
#include "ir/dtype.h"

namespace stepjit::test {

// Element `i` of the `dtype` elements at `p` (f32, f64, f16 or bf16); f16
// and bf16 read back exactly.
inline double LoadElement(const void* p, ir::DType dtype, int64_t i) {
  switch (dtype) {
    case ir::DType::kF64:
      return static_cast<const double*>(p)[i];
    case ir::DType::kF16:
      return static_cast<const ir::Half*>(p)[i];
    case ir::DType::kBF16:
      return static_cast<const ir::BFloat16*>(p)[i];
    default:
      return static_cast<const float*>(p)[i];
  }
}

// Stores `v` rounded to `dtype` as element `i` at `p`.
inline void StoreElement(void* p, ir::DType dtype, int64_t i, double v) {
  switch (dtype) {
    case ir::DType::kF64:
      static_cast<double*>(p)[i] = v;
      break;
    case ir::DType::kF16:
      static_cast<ir::Half*>(p)[i] = ir::Half(static_cast<float>(v));
      break;
    case ir::DType::kBF16:
      static_cast<ir::BFloat16*>(p)[i] = ir::BFloat16(static_cast<float>(v));
      break;
    default:
      static_cast<float*>(p)[i] = static_cast<float>(v);
  }
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

// One element of a product in float64 from the operands `g` holds: `init`
// plus the terms op(A)[i, l] * op(B)[l, j] of batch element `batch`, in order
// of l, and |init| plus the terms' magnitudes (what GemmTolerance is
// relative to).
struct ProductElement {
  double value, magnitude;
};
inline ProductElement RefProductElement(const runtime::cpu::GemmArgs& g,
                                        int64_t batch, int64_t i, int64_t j,
                                        double init) {
  ProductElement e{init, std::abs(init)};
  for (int64_t l = 0; l < g.k; ++l) {
    const double t =
        LoadElement(
            g.a, g.dtype,
            batch * g.stride_a + (g.trans_a ? l * g.lda + i : i * g.lda + l)) *
        LoadElement(
            g.b, g.dtype,
            batch * g.stride_b + (g.trans_b ? j * g.ldb + l : l * g.ldb + j));
    e.value += t;
    e.magnitude += std::abs(t);
  }
  return e;
}

// A GEMM result element's tolerance, relative to the sum of its terms'
// magnitudes: the f32 accumulation order of every backend, and for f16 and
// bf16 one rounding of the output (2^-9 for bf16) on top.
inline double GemmTolerance(ir::DType t) {
  switch (t) {
    case ir::DType::kF32:
      return 1e-5;
    case ir::DType::kF64:
      return 1e-12;
    default:
      return 1e-2;
  }
}

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_DTYPE_ELEMENTS_H_
