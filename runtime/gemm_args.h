// The arguments of a GEMM call, the same on every device: the CPU runs them
// with OpenBLAS or oneDNN (devices/cpu/gemm.h), CUDA with cuBLASLt
// (devices/cuda/cublaslt/) or the host emulator.
#ifndef STEPJIT_RUNTIME_GEMM_ARGS_H_
#define STEPJIT_RUNTIME_GEMM_ARGS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ir/dtype.h"
#include "ir/op.h"

namespace stepjit::runtime {

// The CPU library (CUDA ignores it).
enum class GemmBackend { kAuto, kOpenBlas, kOneDnn };

// Applied to every element of C last: an op the table marks kGemmActivation
// (ir/ops.def), computed as its scalar definition (ir/scalar_def.h); none
// when empty.
using GemmActivation = std::optional<ir::OpId>;

// C[m,n] = act(op(A)[m,k] * op(B)[k,n] (+ C when accumulating) + bias[n]),
// all row-major. op(X) is X or its transpose; lda/ldb/ldc are the row pitches
// of the matrices as stored (so lda >= m when trans_a, lda >= k otherwise).
// oneDNN adds the bias and applies the activation inside its matmul primitive
// (DNNL_ARG_BIAS, an eltwise post-op); OpenBLAS does them in one pass over C
// after the product. With `bias_grad`, the call also writes the bias gradient
// bias_grad[i] = sum over l < k of op(A)[i, l] (m elements of `dtype`, 0 when
// k == 0; devices/cpu/gemm_bias_grad.h), for one product (batch == 1) only.
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
  GemmActivation activation = std::nullopt;
  void* bias_grad = nullptr;  // m elements of `dtype` written, or none
  // Batched: `batch` products; element strides between consecutive matrices.
  // A stride of 0 broadcasts one A or B to every product (never for C).
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  GemmBackend backend = GemmBackend::kAuto;
};

// How a device words and bounds the checks of ValidateGemmArgs.
struct GemmChecks {
  // The messages' first words: "Gemm", "device Gemm".
  absl::string_view who;
  // An ld message adds ", transposed" for an operand that op() transposes.
  bool says_transposed = false;
  // The most an ld and an operand's stored rows may be (the LP64 OpenBLAS
  // takes them as int); none when nullopt.
  std::optional<int64_t> max_extent = std::nullopt;
};

// InvalidArgumentError naming the first bad argument of `g`: a dtype other
// than f32, f64, f16 or bf16, negative sizes or batch strides, a batch with
// stride_c == 0, an ld shorter than its operand's stored row (or above
// max_extent), a null A, B or C the call reads, a bias_grad with batch != 1
// or with a null A that has terms. OK otherwise.
absl::Status ValidateGemmArgs(const GemmArgs& g, const GemmChecks& checks);

// "auto", "openblas" or "onednn".
absl::string_view GemmBackendName(GemmBackend b);
// "none" or the activation op's name ("relu", "silu").
absl::string_view GemmActivationName(GemmActivation a);

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_GEMM_ARGS_H_
