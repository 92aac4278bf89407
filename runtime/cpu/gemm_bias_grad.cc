// Row sums of op(A) for GemmArgs::bias_grad, in one pass over A.
#include "runtime/cpu/gemm_bias_grad.h"

#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/dtype.h"

namespace stepjit::runtime::cpu {
namespace {

using ir::DType;

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

absl::Status ValidateBiasGrad(const GemmArgs& g) {
  if (g.bias_grad == nullptr) return absl::OkStatus();
  if (g.batch != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gemm: expected batch = 1 with bias_grad (the bias gradient of one "
        "product), got batch=",
        g.batch));
  }
  if (g.a == nullptr && g.m > 0 && g.k > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gemm: expected a non-null pointer for A (", g.trans_a ? g.k : g.m, "x",
        g.trans_a ? g.m : g.k, ") to sum into bias_grad, got null"));
  }
  return absl::OkStatus();
}

void ComputeBiasGrad(const GemmArgs& g) {
  switch (g.dtype) {
    case DType::kF32:
      return RowSums<float>(g);
    case DType::kF64:
      return RowSums<double>(g);
    case DType::kF16:
      return RowSums<ir::Half>(g);
    case DType::kBF16:
      return RowSums<ir::BFloat16>(g);
    default:
      return;  // Validate rejected the other dtypes
  }
}

}  // namespace stepjit::runtime::cpu
