// CPU matrix multiply for the eager runtime: OpenBLAS or oneDNN, chosen per
// shape.
#ifndef STEPJIT_RUNTIME_CPU_GEMM_H_
#define STEPJIT_RUNTIME_CPU_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ir/dtype.h"

namespace stepjit::runtime::cpu {

enum class GemmBackend { kAuto, kOpenBlas, kOneDnn };

// Applied to every element of C last, as the scalar definitions of the ops of
// the same names (ir/scalar_def.h).
enum class GemmActivation { kNone, kRelu, kGelu, kGeluTanh };

// C[m,n] = act(op(A)[m,k] * op(B)[k,n] (+ C when accumulating) + bias[n]),
// all row-major. op(X) is X or its transpose; lda/ldb/ldc are the row pitches
// of the matrices as stored (so lda >= m when trans_a, lda >= k otherwise).
// oneDNN adds the bias and applies the activation inside its matmul primitive
// (DNNL_ARG_BIAS, an eltwise post-op); OpenBLAS does them in one pass over C
// after the product. With `bias_grad`, the call also writes the bias gradient
// bias_grad[i] = sum over l < k of op(A)[i, l] (m elements of `dtype`, 0 when
// k == 0; runtime/cpu/gemm_bias_grad.h), for one product (batch == 1) only.
struct GemmArgs {
  ir::DType dtype;  // f32, f64, f16 or bf16; A, B and C all have this dtype
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;     // beta = 1 instead of 0
  const void* bias = nullptr;  // n elements of `dtype`, or none
  GemmActivation activation = GemmActivation::kNone;
  void* bias_grad = nullptr;  // m elements of `dtype` written, or none
  // Batched: `batch` products; element strides between consecutive matrices.
  // A stride of 0 broadcasts one A or B to every product (never for C).
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  GemmBackend backend = GemmBackend::kAuto;
};

// Runs the product. Invalid arguments (negative sizes, short leading
// dimensions, null pointers, non-floating dtypes, a bias gradient of a
// batch) give InvalidArgumentError;
// asking for oneDNN with f64 (which oneDNN lacks) gives UnimplementedError.
// f16 and bf16 accumulate in f32 and round the result once.
absl::Status Gemm(const GemmArgs& args);

// The backend kAuto resolves to for these arguments (never kAuto).
GemmBackend ChooseBackend(const GemmArgs& args);

// "auto", "openblas" or "onednn".
absl::string_view GemmBackendName(GemmBackend b);
// "none", "relu", "gelu" or "gelu_tanh".
absl::string_view GemmActivationName(GemmActivation a);

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_RUNTIME_CPU_GEMM_H_
