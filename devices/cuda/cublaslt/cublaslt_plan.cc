// PlanLtGemm: validates a device GEMM and maps it onto cuBLASLt's view.
#include "devices/cuda/cublaslt/cublaslt_plan.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "ir/dtype.h"
#include "ir/status.h"

// The mirrored constants are checked against cuBLASLt's header when the
// toolkit has it (NVRTC from PyPI wheels comes without it).
#if defined(STEPJIT_HAVE_NVRTC) && __has_include(<cublasLt.h>)
#define STEPJIT_CHECK_CUBLASLT_ABI 1
#include <cublasLt.h>
#endif

namespace stepjit::runtime::cuda {

namespace {

using ir::DType;

#ifdef STEPJIT_CHECK_CUBLASLT_ABI
static_assert(static_cast<int>(LtOp::kN) == CUBLAS_OP_N);
static_assert(static_cast<int>(LtOp::kT) == CUBLAS_OP_T);
static_assert(static_cast<int>(LtDataType::kF32) == CUDA_R_32F);
static_assert(static_cast<int>(LtDataType::kF64) == CUDA_R_64F);
static_assert(static_cast<int>(LtDataType::kF16) == CUDA_R_16F);
static_assert(static_cast<int>(LtDataType::kBF16) == CUDA_R_16BF);
static_assert(static_cast<int>(LtComputeType::k32F) == CUBLAS_COMPUTE_32F);
static_assert(static_cast<int>(LtComputeType::k32FFastTF32) ==
              CUBLAS_COMPUTE_32F_FAST_TF32);
static_assert(static_cast<int>(LtComputeType::k64F) == CUBLAS_COMPUTE_64F);
static_assert(static_cast<int>(LtEpilogue::kDefault) ==
              CUBLASLT_EPILOGUE_DEFAULT);
static_assert(static_cast<int>(LtEpilogue::kRelu) == CUBLASLT_EPILOGUE_RELU);
static_assert(static_cast<int>(LtEpilogue::kBias) == CUBLASLT_EPILOGUE_BIAS);
static_assert(static_cast<int>(LtEpilogue::kReluBias) ==
              CUBLASLT_EPILOGUE_RELU_BIAS);
static_assert(static_cast<int>(LtEpilogue::kGelu) == CUBLASLT_EPILOGUE_GELU);
static_assert(static_cast<int>(LtEpilogue::kGeluBias) ==
              CUBLASLT_EPILOGUE_GELU_BIAS);
static_assert(static_cast<int>(LtEpilogue::kBgradB) ==
              CUBLASLT_EPILOGUE_BGRADB);
#endif

LtDataType DataType(DType t) {
  switch (t) {
    case DType::kF64:
      return LtDataType::kF64;
    case DType::kF16:
      return LtDataType::kF16;
    case DType::kBF16:
      return LtDataType::kBF16;
    default:
      return LtDataType::kF32;
  }
}

}  // namespace

absl::StatusOr<LtPlan> PlanLtGemm(const DeviceGemmArgs& args,
                                  bool fuse_epilogue) {
  const GemmArgs& g = args.gemm;
  RETURN_IF_ERROR(ValidateGemmArgs(g, {.who = "device Gemm"}));
  if (g.batch > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("device Gemm: expected batch <= ", INT32_MAX,
                     " (cuBLASLt counts it in "
                     "32 bits), got ",
                     g.batch));
  }
  LtPlan p;
  p.batch = g.batch;
  p.no_work = g.batch == 0 || g.m == 0 || g.n == 0;
  p.skip_product = !p.no_work && g.k == 0;
  p.m = g.n;
  p.n = g.m;
  p.k = g.k;
  const bool batched = g.batch > 1;
  // cuBLASLt's A: the caller's B, stored row-major as k x n (n x k when
  // transposed), i.e. column-major n x k (k x n), which must become
  // op(B)^T, n x k: no op, or a transpose when B was stored transposed.
  p.op_a = g.trans_b ? LtOp::kT : LtOp::kN;
  p.a = {g.b, g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k, g.ldb,
         batched ? g.stride_b : 0};
  // cuBLASLt's B: the caller's A (m x k, or k x m transposed) as k x m.
  p.op_b = g.trans_a ? LtOp::kT : LtOp::kN;
  p.b = {g.a, g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m, g.lda,
         batched ? g.stride_a : 0};
  p.c = {g.c, g.n, g.m, g.ldc, batched ? g.stride_c : 0};
  p.alpha = 1;
  p.beta = g.accumulate ? 1 : 0;
  p.data_type = DataType(g.dtype);
  if (g.dtype == DType::kF64) {
    p.compute_type = LtComputeType::k64F;
    p.scale_type = LtDataType::kF64;
  } else {
    p.compute_type = g.dtype == DType::kF32 && args.allow_tf32
                         ? LtComputeType::k32FFastTF32
                         : LtComputeType::k32F;
    p.scale_type = LtDataType::kF32;
  }
  const bool bias = g.bias != nullptr;
  p.post_bias_grad = g.bias_grad;
  if (p.skip_product || !fuse_epilogue) {
    p.epilogue = LtEpilogue::kDefault;
    p.post_activation = g.activation;
    p.post_bias = g.bias;
    return p;
  }
  if (!g.activation.has_value()) {
    p.epilogue = bias ? LtEpilogue::kBias : LtEpilogue::kDefault;
  } else if (*g.activation == ir::OpId::kRelu) {
    p.epilogue = bias ? LtEpilogue::kReluBias : LtEpilogue::kRelu;
  } else if (*g.activation == ir::OpId::kGeluTanh) {
    p.epilogue = bias ? LtEpilogue::kGeluBias : LtEpilogue::kGelu;
  } else {
    // No cuBLASLt epilogue computes it as the scalar definition does (its
    // GELU is the tanh approximation): add the bias there and apply the
    // activation afterwards with the generated epilogue kernel.
    p.epilogue = bias ? LtEpilogue::kBias : LtEpilogue::kDefault;
    p.post_activation = g.activation;
  }
  if (p.epilogue == LtEpilogue::kBias || p.epilogue == LtEpilogue::kReluBias ||
      p.epilogue == LtEpilogue::kGeluBias) {
    p.bias = g.bias;
  }
  // The bias pointer is free: cuBLASLt writes the bias gradient there (with
  // C's type, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE). A run without a product
  // (no_work) leaves it to the kernel.
  if (g.bias_grad != nullptr && !p.no_work &&
      p.epilogue == LtEpilogue::kDefault) {
    p.epilogue = LtEpilogue::kBgradB;
    p.bias = g.bias_grad;
    p.post_bias_grad = nullptr;
  }
  return p;
}

}  // namespace stepjit::runtime::cuda
