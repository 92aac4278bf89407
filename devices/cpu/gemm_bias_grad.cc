// Row sums of op(A) for GemmArgs::bias_grad, in one pass over A.
#include "devices/cpu/gemm_bias_grad.h"

#include <type_traits>
#include <vector>

#include "devices/cpu/loops.h"
#include "ir/dtype.h"

namespace stepjit::runtime::cpu {
namespace {

template <typename T>
void RowSums(const GemmArgs& g) {
  const T* a = static_cast<const T*>(g.a);
  std::vector<double> sum(static_cast<size_t>(g.m), 0.0);
  if (g.trans_a) {
    // A is stored k x m: row l of A adds to every sum, in memory order.
    for (int64_t l = 0; l < g.k; ++l) {
      const T* row = a + l * g.lda;
      for (int64_t i = 0; i < g.m; ++i) sum[i] += static_cast<double>(row[i]);
    }
  } else {
    for (int64_t i = 0; i < g.m; ++i) {
      const T* row = a + i * g.lda;
      double s = 0;
      for (int64_t l = 0; l < g.k; ++l) s += static_cast<double>(row[l]);
      sum[i] = s;
    }
  }
  using Narrow = std::conditional_t<std::is_same_v<T, double>, double, float>;
  T* out = static_cast<T*>(g.bias_grad);
  for (int64_t i = 0; i < g.m; ++i) out[i] = T(static_cast<Narrow>(sum[i]));
}

}  // namespace

// ValidateGemmArgs rejected the other dtypes.
void ComputeBiasGrad(const GemmArgs& g) {
  SJ_DISPATCH_FLOAT(g.dtype, "Gemm", RowSums<T>(g));
}

}  // namespace stepjit::runtime::cpu
