// cuBLASLt for the driver backend's GEMM: the library is opened with dlopen
// at run time (no link-time dependency), and stepjit's row-major GEMM
// (runtime/cpu/gemm.h conventions) is mapped onto cuBLASLt's column-major
// one by PlanLtGemm, a pure function that tests check on a CPU.
#ifndef STEPJIT_RUNTIME_CUDA_CUBLASLT_H_
#define STEPJIT_RUNTIME_CUDA_CUBLASLT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cuda/backend.h"

namespace stepjit::runtime::cuda {

// cuBLASLt's values for the enums a plan uses, as cublasLt.h,
// cublas_api.h and library_types.h define them (cublaslt.cc checks them
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
  kGeluBias = 36
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
// cuBLASLt's BIAS epilogues add.
struct LtPlan {
  int64_t m = 0, n = 0, k = 0;  // as cuBLASLt sees them
  LtOp op_a = LtOp::kN, op_b = LtOp::kN;
  LtMatrix a, b, c;  // c is also D
  int64_t batch = 1;
  double alpha = 1, beta = 0;
  LtEpilogue epilogue = LtEpilogue::kDefault;
  const void* bias = nullptr;                // set when the epilogue adds one
  LtDataType data_type = LtDataType::kF32;   // A, B, C, D and the bias
  LtDataType scale_type = LtDataType::kF32;  // alpha and beta
  LtComputeType compute_type = LtComputeType::k32F;
  // What the epilogue leaves to a kernel over C afterwards (exact GELU, or
  // everything when the fused epilogue was not asked for):
  //   C = post_activation(C + post_bias), post_bias per column of the
  //   caller's (row-major) C.
  cpu::GemmActivation post_activation = cpu::GemmActivation::kNone;
  const void* post_bias = nullptr;
  // The product is empty (k == 0): no cuBLASLt call; the kernel computes
  // C = act(beta * C + bias) alone (skip_product), or nothing is left to
  // do when C is empty (m or n == 0: no_work).
  bool skip_product = false;
  bool no_work = false;
};

// The plan for `args`. `fuse_epilogue` false leaves bias and activation to
// the kernel (for types cuBLASLt has no such epilogue for). InvalidArgument
// for arguments runtime::cpu::Gemm would refuse: a dtype other than f32,
// f64, f16 or bf16, negative sizes, short leading dimensions, null pointers,
// a batch stride of 0 for C.
absl::StatusOr<LtPlan> PlanLtGemm(const DeviceGemmArgs& args,
                                  bool fuse_epilogue = true);

// The cuBLASLt shared library, opened once per process.
struct CublasLtLibrary {
  std::string path;    // the file dlopen found
  size_t version = 0;  // cublasLtGetVersion(), e.g. 130002
  struct Api;
  const Api* api = nullptr;  // every entry point this file calls
};
// Tries libcublasLt.so.13, .so.12 and .so on the loader's path, then in
// /usr/local/cuda/lib64 and beside the libnvrtc this binary loaded. Needs no
// GPU. NotFound naming every path tried; Internal for a library lacking a
// symbol.
absl::StatusOr<const CublasLtLibrary*> LoadCublasLt();

// GEMMs through cuBLASLt on one device, queued on the caller's stream. The
// backend allocates the workspaces (32 MiB per stream and per capture) and
// loads the kernels for epilogues cuBLASLt lacks (exact GELU); it must
// outlive this object, and its device context must be current on the
// calling thread.
// Algorithms are chosen by cuBLASLt's heuristic once per shape, layout,
// dtype, epilogue and pointer alignment.
class CublasLtGemm {
 public:
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(Backend* backend);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // `capture` numbers the graph capture in progress on `stream` (0: none).
  // A capture gets a workspace of its own, kept while this object lives:
  // its graph may be replayed on any stream, after `stream` is gone.
  absl::Status Run(const DeviceGemmArgs& args, Stream stream,
                   uint64_t capture = 0);
  // Frees `stream`'s workspace (not its captures'), for a stream about to be
  // destroyed; its queued work must have finished.
  absl::Status ReleaseStream(Stream stream);

 private:
  struct Impl;
  explicit CublasLtGemm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The CUDA C of the kernel that finishes a plan's epilogue over C for
// `dtype` and `activation` (stepjit's scalar definitions, computed in float
// for the half types and rounded once), and its kernel's name. Its
// arguments: (T* c, const T* bias, long long rows, long long cols,
// long long ldc, long long stride_c, long long batch, int keep_c); bias may
// be null, keep_c 0 starts from 0 instead of C.
struct EpilogueKernelSource {
  std::string name;
  std::string source;
};
EpilogueKernelSource GemmEpilogueKernel(ir::DType dtype,
                                        cpu::GemmActivation activation);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_RUNTIME_CUDA_CUBLASLT_H_
