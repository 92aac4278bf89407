// PlanLtGemm: stepjit's row-major GEMM as cuBLASLt's column-major one.
//
// A pure function of the arguments, with no GPU and no cuBLASLt needed, so
// that tests can check the mapping on a CPU (devices/cuda/cublaslt/cublaslt.h
// runs the plans; runtime/gemm_args.h states the row-major conventions).
#ifndef STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_PLAN_H_
#define STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_PLAN_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "devices/cuda/backend.h"
#include "runtime/gemm_args.h"

namespace stepjit::runtime::cuda {

// cuBLASLt's values for the enums a plan uses, as cublasLt.h,
// cublas_api.h and library_types.h define them (cublaslt_plan.cc checks them
// against those headers when the build has the CUDA Toolkit).
enum class LtOp : int32_t { kN = 0, kT = 1 };
enum class LtDataType : int32_t { kF32 = 0, kF64 = 1, kF16 = 2, kBF16 = 14 };
enum class LtComputeType : int32_t { k32F = 68, k32FFastTF32 = 77, k64F = 70 };
enum class LtEpilogue : int32_t {
  kDefault = 1,
  kRelu = 2,
  kBias = 4,
  kReluBias = 6,
  kGelu = 32,  // the tanh approximation (stepjit's gelu_tanh)
  kGeluBias = 36,
  // Writes the sums over k of cuBLASLt's B (the caller's A) to the bias
  // pointer, one per column of D (per row of the caller's C).
  kBgradB = 512
};

// One matrix as cuBLASLt sees it: column-major, `rows` x `cols` with
// leading dimension `ld`; consecutive matrices of a batch `batch_stride`
// elements apart (0: one matrix broadcast to every product).
struct LtMatrix {
  const void* ptr = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
  int64_t batch_stride = 0;
};

// cuBLASLt computes, per batch element and column-major,
//   D = epilogue(alpha * op_a(A) * op_b(B) + beta * C),  D = C in place,
// with A m x k and B k x n after their ops. A row-major matrix with row
// pitch ld is the column-major transpose with the same ld, so the row-major
// C = op(A) op(B) becomes C^T = op(B)^T op(A)^T: cuBLASLt's A is the
// caller's B, its B the caller's A, and m and n trade places. The caller's
// bias (one value per column of C) is one per row of C^T, which is what
// cuBLASLt's BIAS epilogues add. The caller's bias gradient (the sums over k
// of op(A), one per row of C) is the sums over k of cuBLASLt's op(B), one
// per column of C^T: the BGRADB epilogue (BGRADA would sum the caller's B).
struct LtPlan {
  int64_t m = 0, n = 0, k = 0;  // as cuBLASLt sees them
  LtOp op_a = LtOp::kN, op_b = LtOp::kN;
  LtMatrix a, b, c;  // c is also D
  int64_t batch = 1;
  double alpha = 1, beta = 0;
  LtEpilogue epilogue = LtEpilogue::kDefault;
  // CUBLASLT_MATMUL_DESC_BIAS_POINTER: the bias BIAS epilogues read, or the
  // bias gradient BGRADB writes; null for other epilogues.
  const void* bias = nullptr;
  LtDataType data_type = LtDataType::kF32;   // A, B, C, D and the bias
  LtDataType scale_type = LtDataType::kF32;  // alpha and beta
  LtComputeType compute_type = LtComputeType::k32F;
  // What the epilogue leaves to a kernel over C afterwards (exact GELU, or
  // everything when the fused epilogue was not asked for):
  //   C = post_activation(C + post_bias), post_bias per column of the
  //   caller's (row-major) C.
  GemmActivation post_activation = std::nullopt;
  const void* post_bias = nullptr;
  // The bias gradient left to a kernel (when BGRADB is not used), from
  // cuBLASLt's B: post_bias_grad[j] = sum over l < k of op_b(B)[l, j] for
  // j < n. It is computed even when no_work (C empty, A not).
  void* post_bias_grad = nullptr;
  // The product is empty (k == 0): no cuBLASLt call; the kernel computes
  // C = act(beta * C + bias) alone (skip_product), or nothing is left to
  // do when C is empty (m or n == 0: no_work).
  bool skip_product = false;
  bool no_work = false;
};

// The plan for `args`. `fuse_epilogue` false leaves bias, activation and
// bias gradient to the kernels (for types cuBLASLt has no such epilogue
// for). A bias gradient is fused (BGRADB) only when no other epilogue is: the
// bias pointer holds one vector. InvalidArgument for arguments
// runtime::cpu::Gemm would refuse: a dtype other than f32, f64, f16 or bf16,
// negative sizes, short leading dimensions, null pointers, a batch stride of
// 0 for C, a bias gradient of a batch.
absl::StatusOr<LtPlan> PlanLtGemm(const DeviceGemmArgs& args,
                                  bool fuse_epilogue = true);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_PLAN_H_
