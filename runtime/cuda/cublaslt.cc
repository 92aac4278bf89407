// cuBLASLt through dlopen: the row-major-to-column-major plan, the library
// loader, the algorithm cache and the kernel for epilogues cuBLASLt lacks.
#include "runtime/cuda/cublaslt.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cuda/cuda_c.h"
#include "codegen/cuda/cuda_math.h"
#include "ir/scalar_def.h"
#include "ir/status.h"

#ifdef STEPJIT_HAVE_NVRTC
#include <cublasLt.h>
#include <nvrtc.h>
#endif

namespace stepjit::runtime::cuda {

namespace {

using cpu::GemmActivation;
using ir::DType;

// cuBLASLt's handles are pointers to opaque structs; its status an int.
using LtStatus = int;
using LtHandle = void*;
using LtMatmulDesc = void*;
using LtLayout = void*;
using LtPreference = void*;
constexpr LtStatus kLtSuccess = 0;
constexpr LtStatus kLtNotInitialized = 1;
constexpr LtStatus kLtAllocFailed = 3;
constexpr LtStatus kLtInvalidValue = 7;
constexpr LtStatus kLtNotSupported = 15;

// Attribute numbers (cublasLtMatmulDescAttributes_t, ...LayoutAttribute_t,
// ...PreferenceAttributes_t).
constexpr int kDescTransA = 3;
constexpr int kDescTransB = 4;
constexpr int kDescEpilogue = 7;
constexpr int kDescBiasPointer = 8;
constexpr int kDescBiasDataType = 26;
constexpr int kLayoutBatchCount = 5;
constexpr int kLayoutStridedBatchOffset = 6;
constexpr int kPrefMaxWorkspaceBytes = 1;
constexpr int kPrefMinAlignmentA = 5;
constexpr int kPrefMinAlignmentB = 6;
constexpr int kPrefMinAlignmentC = 7;
constexpr int kPrefMinAlignmentD = 8;

struct LtAlgo {
  uint64_t data[8];
};
struct LtHeuristicResult {
  LtAlgo algo;
  size_t workspace_size;
  LtStatus state;
  float waves_count;
  int reserved[4];
};

#ifdef STEPJIT_HAVE_NVRTC
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
static_assert(kLtSuccess == CUBLAS_STATUS_SUCCESS);
static_assert(kLtNotInitialized == CUBLAS_STATUS_NOT_INITIALIZED);
static_assert(kLtAllocFailed == CUBLAS_STATUS_ALLOC_FAILED);
static_assert(kLtInvalidValue == CUBLAS_STATUS_INVALID_VALUE);
static_assert(kLtNotSupported == CUBLAS_STATUS_NOT_SUPPORTED);
static_assert(kDescTransA == CUBLASLT_MATMUL_DESC_TRANSA);
static_assert(kDescTransB == CUBLASLT_MATMUL_DESC_TRANSB);
static_assert(kDescEpilogue == CUBLASLT_MATMUL_DESC_EPILOGUE);
static_assert(kDescBiasPointer == CUBLASLT_MATMUL_DESC_BIAS_POINTER);
static_assert(kDescBiasDataType == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
static_assert(kLayoutBatchCount == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT);
static_assert(kLayoutStridedBatchOffset ==
              CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
static_assert(kPrefMaxWorkspaceBytes ==
              CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
static_assert(kPrefMinAlignmentA == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES);
static_assert(kPrefMinAlignmentB == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES);
static_assert(kPrefMinAlignmentC == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES);
static_assert(kPrefMinAlignmentD == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES);
static_assert(sizeof(LtAlgo) == sizeof(cublasLtMatmulAlgo_t));
static_assert(sizeof(LtHeuristicResult) ==
              sizeof(cublasLtMatmulHeuristicResult_t));
static_assert(offsetof(LtHeuristicResult, workspace_size) ==
              offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
static_assert(offsetof(LtHeuristicResult, state) ==
              offsetof(cublasLtMatmulHeuristicResult_t, state));
#endif

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

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

absl::Status ValidateGemm(const cpu::GemmArgs& g) {
  if (!ir::IsFloating(g.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device Gemm: expected dtype f32, f64, f16 or bf16, got ",
                     ir::DTypeName(g.dtype)));
  }
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device Gemm: expected non-negative sizes, got m=", g.m,
                     " n=", g.n, " k=", g.k, " batch=", g.batch));
  }
  if (g.stride_a < 0 || g.stride_b < 0 || g.stride_c < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device Gemm: expected non-negative batch strides, got stride_a=",
        g.stride_a, " stride_b=", g.stride_b, " stride_c=", g.stride_c));
  }
  if (g.batch > 1 && g.stride_c == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device Gemm: expected stride_c > 0 for batch=", g.batch,
                     " (each product needs its own C), got 0"));
  }
  const struct {
    const char* ld_name;
    int64_t ld;
    const char* name;
    int64_t rows, cols;  // as stored, row-major
    const void* ptr;
  } operands[] = {
      {"lda", g.lda, "A", g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.a},
      {"ldb", g.ldb, "B", g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.b},
      {"ldc", g.ldc, "C", g.m, g.n, g.c}};
  for (const auto& op : operands) {
    const int64_t need = std::max<int64_t>(1, op.cols);
    if (op.ld < need) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device Gemm: expected ", op.ld_name, " >= ", need, " (", op.name,
          " is stored ", op.rows, "x", op.cols, "), got ", op.ld));
    }
    const bool read =
        g.batch > 0 && g.m > 0 && g.n > 0 && (op.name[0] == 'C' || g.k > 0);
    if (op.ptr == nullptr && read) {
      return absl::InvalidArgumentError(
          absl::StrCat("device Gemm: expected a non-null pointer for ", op.name,
                       " (", op.rows, "x", op.cols, "), got null"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LtPlan> PlanLtGemm(const DeviceGemmArgs& args,
                                  bool fuse_epilogue) {
  const cpu::GemmArgs& g = args.gemm;
  RETURN_IF_ERROR(ValidateGemm(g));
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
  if (p.skip_product || !fuse_epilogue) {
    p.epilogue = LtEpilogue::kDefault;
    p.post_activation = g.activation;
    p.post_bias = g.bias;
    return p;
  }
  switch (g.activation) {
    case GemmActivation::kNone:
      p.epilogue = bias ? LtEpilogue::kBias : LtEpilogue::kDefault;
      break;
    case GemmActivation::kRelu:
      p.epilogue = bias ? LtEpilogue::kReluBias : LtEpilogue::kRelu;
      break;
    case GemmActivation::kGeluTanh:
      p.epilogue = bias ? LtEpilogue::kGeluBias : LtEpilogue::kGelu;
      break;
    case GemmActivation::kGelu:
      // cuBLASLt's GELU is the tanh approximation: add the bias there and
      // apply the exact one afterwards.
      p.epilogue = bias ? LtEpilogue::kBias : LtEpilogue::kDefault;
      p.post_activation = GemmActivation::kGelu;
      break;
  }
  if (p.epilogue == LtEpilogue::kBias || p.epilogue == LtEpilogue::kReluBias ||
      p.epilogue == LtEpilogue::kGeluBias) {
    p.bias = g.bias;
  }
  return p;
}

EpilogueKernelSource GemmEpilogueKernel(DType dtype,
                                        GemmActivation activation) {
  using codegen::cuda::CudaMath;
  using codegen::cuda::CudaStatements;
  const bool is_double = dtype == DType::kF64;
  const std::string reg = codegen::cuda::RegType(dtype);
  const std::string mem = codegen::cuda::MemType(dtype);
  EpilogueKernelSource k;
  k.name = absl::StrCat("sj_gemm_epilogue_", ir::DTypeName(dtype), "_",
                        cpu::GemmActivationName(activation));
  CudaStatements body;
  body.indent = "    ";
  CudaMath m{body, is_double};
  std::string y = "x";
  switch (activation) {
    case GemmActivation::kNone:
      break;
    case GemmActivation::kRelu:
      y = ir::ScalarDef<ir::OpId::kRelu>::Apply(m, y);
      break;
    case GemmActivation::kGelu:
      y = ir::ScalarDef<ir::OpId::kGelu>::Apply(m, y);
      break;
    case GemmActivation::kGeluTanh:
      y = ir::ScalarDef<ir::OpId::kGeluTanh>::Apply(m, y);
      break;
  }
  uint32_t helpers = 0;
  if (dtype == DType::kF16) helpers |= codegen::cuda::kHelperF16;
  if (dtype == DType::kBF16) helpers |= codegen::cuda::kHelperBF16;
  k.source = absl::StrCat(
      codegen::cuda::Preamble(helpers),
      "// C = act(C + bias) over a batch of row-major matrices, after a GEMM.\n"
      "extern \"C\" __global__ void ",
      k.name, "(", mem, "* c, const ", mem,
      "* bias, long long rows, long long cols, long long ldc,\n"
      "    long long stride_c, long long batch, int keep_c) {\n"
      "  const long long total = rows * cols * batch;\n"
      "  const long long step = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;"
      " i < total;\n"
      "       i += step) {\n"
      "    const long long col = i % cols;\n"
      "    const long long row = (i / cols) % rows;\n"
      "    const long long at = i / cols / rows * stride_c + row * ldc + col;\n"
      "    ",
      reg, " x = keep_c ? ", codegen::cuda::Load(dtype, "c", "at"), " : ",
      m.Const(0), ";\n", "    if (bias != nullptr) x = x + ",
      codegen::cuda::Load(dtype, "bias", "col"), ";\n", body.text, "    ",
      codegen::cuda::Store(dtype, "c", "at", y), "\n  }\n}\n");
  return k;
}

// ---- The library --------------------------------------------------------

struct CublasLtLibrary::Api {
  LtStatus (*Create)(LtHandle*) = nullptr;
  LtStatus (*Destroy)(LtHandle) = nullptr;
  size_t (*GetVersion)() = nullptr;
  const char* (*GetStatusName)(LtStatus) = nullptr;
  const char* (*GetStatusString)(LtStatus) = nullptr;
  LtStatus (*MatmulDescCreate)(LtMatmulDesc*, int32_t, int32_t) = nullptr;
  LtStatus (*MatmulDescDestroy)(LtMatmulDesc) = nullptr;
  LtStatus (*MatmulDescSetAttribute)(LtMatmulDesc, int, const void*,
                                     size_t) = nullptr;
  LtStatus (*MatrixLayoutCreate)(LtLayout*, int32_t, uint64_t, uint64_t,
                                 int64_t) = nullptr;
  LtStatus (*MatrixLayoutDestroy)(LtLayout) = nullptr;
  LtStatus (*MatrixLayoutSetAttribute)(LtLayout, int, const void*,
                                       size_t) = nullptr;
  LtStatus (*MatmulPreferenceCreate)(LtPreference*) = nullptr;
  LtStatus (*MatmulPreferenceDestroy)(LtPreference) = nullptr;
  LtStatus (*MatmulPreferenceSetAttribute)(LtPreference, int, const void*,
                                           size_t) = nullptr;
  LtStatus (*MatmulAlgoGetHeuristic)(LtHandle, LtMatmulDesc, LtLayout, LtLayout,
                                     LtLayout, LtLayout, LtPreference, int,
                                     LtHeuristicResult*, int*) = nullptr;
  LtStatus (*Matmul)(LtHandle, LtMatmulDesc, const void*, const void*, LtLayout,
                     const void*, LtLayout, const void*, const void*, LtLayout,
                     void*, LtLayout, const LtAlgo*, void*, size_t,
                     void*) = nullptr;
};

namespace {

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

// Where to look, in order: the loader's path, then the toolkit and the
// directory of the NVRTC this binary was linked with.
std::vector<std::string> Candidates() {
  const char* names[] = {"libcublasLt.so.13", "libcublasLt.so.12",
                         "libcublasLt.so"};
  std::vector<std::string> dirs = {"", "/usr/local/cuda/lib64/"};
#ifdef STEPJIT_HAVE_NVRTC
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) != 0 &&
      info.dli_fname != nullptr) {
    std::string dir = info.dli_fname;
    dir.erase(dir.find_last_of('/') + 1);
    if (!dir.empty() && dir != dirs[1]) dirs.push_back(dir);
  }
#endif
  std::vector<std::string> out;
  for (const std::string& dir : dirs)
    for (const char* name : names) out.push_back(absl::StrCat(dir, name));
  return out;
}

absl::StatusOr<CublasLtLibrary*> OpenCublasLt() {
  std::vector<std::string> failures;
  void* lib = nullptr;
  std::string path;
  for (const std::string& candidate : Candidates()) {
    dlerror();
    lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      path = candidate;
      break;
    }
    const char* err = dlerror();
    failures.push_back(err != nullptr ? err : candidate);
  }
  if (lib == nullptr) {
    return absl::NotFoundError(absl::StrCat("cuBLASLt not found: tried ",
                                            absl::StrJoin(failures, "; ")));
  }
  auto* api = new CublasLtLibrary::Api;
  const std::pair<const char*, bool> symbols[] = {
      {"cublasLtCreate", Resolve(lib, "cublasLtCreate", api->Create)},
      {"cublasLtDestroy", Resolve(lib, "cublasLtDestroy", api->Destroy)},
      {"cublasLtGetVersion",
       Resolve(lib, "cublasLtGetVersion", api->GetVersion)},
      {"cublasLtGetStatusName",
       Resolve(lib, "cublasLtGetStatusName", api->GetStatusName)},
      {"cublasLtGetStatusString",
       Resolve(lib, "cublasLtGetStatusString", api->GetStatusString)},
      {"cublasLtMatmulDescCreate",
       Resolve(lib, "cublasLtMatmulDescCreate", api->MatmulDescCreate)},
      {"cublasLtMatmulDescDestroy",
       Resolve(lib, "cublasLtMatmulDescDestroy", api->MatmulDescDestroy)},
      {"cublasLtMatmulDescSetAttribute",
       Resolve(lib, "cublasLtMatmulDescSetAttribute",
               api->MatmulDescSetAttribute)},
      {"cublasLtMatrixLayoutCreate",
       Resolve(lib, "cublasLtMatrixLayoutCreate", api->MatrixLayoutCreate)},
      {"cublasLtMatrixLayoutDestroy",
       Resolve(lib, "cublasLtMatrixLayoutDestroy", api->MatrixLayoutDestroy)},
      {"cublasLtMatrixLayoutSetAttribute",
       Resolve(lib, "cublasLtMatrixLayoutSetAttribute",
               api->MatrixLayoutSetAttribute)},
      {"cublasLtMatmulPreferenceCreate",
       Resolve(lib, "cublasLtMatmulPreferenceCreate",
               api->MatmulPreferenceCreate)},
      {"cublasLtMatmulPreferenceDestroy",
       Resolve(lib, "cublasLtMatmulPreferenceDestroy",
               api->MatmulPreferenceDestroy)},
      {"cublasLtMatmulPreferenceSetAttribute",
       Resolve(lib, "cublasLtMatmulPreferenceSetAttribute",
               api->MatmulPreferenceSetAttribute)},
      {"cublasLtMatmulAlgoGetHeuristic",
       Resolve(lib, "cublasLtMatmulAlgoGetHeuristic",
               api->MatmulAlgoGetHeuristic)},
      {"cublasLtMatmul", Resolve(lib, "cublasLtMatmul", api->Matmul)},
  };
  for (const auto& [name, found] : symbols) {
    if (!found) {
      delete api;
      dlclose(lib);
      return absl::InternalError(absl::StrCat(
          path, " has no ", name, "; expected cuBLASLt 12 or newer"));
    }
  }
  auto* out = new CublasLtLibrary;
  out->path = path;
  out->version = api->GetVersion();
  out->api = api;
  return out;
}

}  // namespace

absl::StatusOr<const CublasLtLibrary*> LoadCublasLt() {
  static const absl::StatusOr<CublasLtLibrary*>* const library =
      new absl::StatusOr<CublasLtLibrary*>(OpenCublasLt());
  if (!library->ok()) return library->status();
  return **library;
}

// ---- GEMMs --------------------------------------------------------------

namespace {

using Api = CublasLtLibrary::Api;

absl::Status LtCheck(const Api& lt, LtStatus s, absl::string_view call) {
  if (s == kLtSuccess) return absl::OkStatus();
  const char* name = lt.GetStatusName(s);
  const char* text = lt.GetStatusString(s);
  const std::string message =
      absl::StrCat(call, ": ", name != nullptr ? name : "CUBLAS_STATUS_?", " (",
                   text != nullptr ? text : absl::StrCat("status ", s), ")");
  switch (s) {
    case kLtAllocFailed:
      return absl::ResourceExhaustedError(message);
    case kLtInvalidValue:
      return absl::InvalidArgumentError(message);
    case kLtNotSupported:
      return absl::UnimplementedError(message);
    case kLtNotInitialized:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

// The largest power of two (up to 256) `p` is aligned to, which the
// heuristic must know to pick a kernel that may load it vectorized.
uint32_t Alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// What a heuristic answer depends on.
using AlgoKey =
    std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t, int64_t, int64_t,
               int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
               int64_t, int32_t, uint32_t, uint32_t, uint32_t, uint32_t>;

AlgoKey KeyOf(const LtPlan& p) {
  return {static_cast<int32_t>(p.data_type),
          static_cast<int32_t>(p.compute_type),
          static_cast<int32_t>(p.op_a),
          static_cast<int32_t>(p.op_b),
          static_cast<int32_t>(p.epilogue),
          p.m,
          p.n,
          p.k,
          p.a.ld,
          p.b.ld,
          p.c.ld,
          p.batch > 1 ? p.batch : 1,
          p.a.batch_stride,
          p.b.batch_stride,
          p.c.batch_stride,
          p.beta != 0,
          Alignment(p.a.ptr),
          Alignment(p.b.ptr),
          Alignment(p.c.ptr),
          p.bias != nullptr ? Alignment(p.bias) : 0};
}

// cuBLASLt descriptors for one call, destroyed with it.
struct Descriptors {
  const Api* lt = nullptr;
  LtMatmulDesc op = nullptr;
  LtLayout a = nullptr, b = nullptr, c = nullptr;

  ~Descriptors() {
    if (op != nullptr) lt->MatmulDescDestroy(op);
    for (LtLayout l : {a, b, c})
      if (l != nullptr) lt->MatrixLayoutDestroy(l);
  }
};

absl::Status MakeLayout(const Api& lt, const LtPlan& p, const LtMatrix& x,
                        LtLayout* out) {
  RETURN_IF_ERROR(
      LtCheck(lt,
              lt.MatrixLayoutCreate(out, static_cast<int32_t>(p.data_type),
                                    static_cast<uint64_t>(x.rows),
                                    static_cast<uint64_t>(x.cols), x.ld),
              absl::StrCat("cublasLtMatrixLayoutCreate(", x.rows, "x", x.cols,
                           ", ld=", x.ld, ")")));
  if (p.batch > 1) {
    const int32_t count = static_cast<int32_t>(p.batch);
    RETURN_IF_ERROR(LtCheck(lt,
                            lt.MatrixLayoutSetAttribute(*out, kLayoutBatchCount,
                                                        &count, sizeof(count)),
                            "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)"));
    const int64_t stride = x.batch_stride;
    RETURN_IF_ERROR(
        LtCheck(lt,
                lt.MatrixLayoutSetAttribute(*out, kLayoutStridedBatchOffset,
                                            &stride, sizeof(stride)),
                "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)"));
  }
  return absl::OkStatus();
}

absl::Status MakeDescriptors(const Api& lt, const LtPlan& p, Descriptors& d) {
  d.lt = &lt;
  RETURN_IF_ERROR(
      LtCheck(lt,
              lt.MatmulDescCreate(&d.op, static_cast<int32_t>(p.compute_type),
                                  static_cast<int32_t>(p.scale_type)),
              "cublasLtMatmulDescCreate"));
  const int32_t op_a = static_cast<int32_t>(p.op_a);
  const int32_t op_b = static_cast<int32_t>(p.op_b);
  const uint32_t epilogue = static_cast<uint32_t>(p.epilogue);
  RETURN_IF_ERROR(LtCheck(
      lt, lt.MatmulDescSetAttribute(d.op, kDescTransA, &op_a, sizeof(op_a)),
      "cublasLtMatmulDescSetAttribute(TRANSA)"));
  RETURN_IF_ERROR(LtCheck(
      lt, lt.MatmulDescSetAttribute(d.op, kDescTransB, &op_b, sizeof(op_b)),
      "cublasLtMatmulDescSetAttribute(TRANSB)"));
  RETURN_IF_ERROR(LtCheck(lt,
                          lt.MatmulDescSetAttribute(
                              d.op, kDescEpilogue, &epilogue, sizeof(epilogue)),
                          "cublasLtMatmulDescSetAttribute(EPILOGUE)"));
  if (p.bias != nullptr) {
    const void* bias = p.bias;
    const int32_t bias_type = static_cast<int32_t>(p.data_type);
    RETURN_IF_ERROR(LtCheck(
        lt,
        lt.MatmulDescSetAttribute(d.op, kDescBiasPointer, &bias, sizeof(bias)),
        "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
    RETURN_IF_ERROR(
        LtCheck(lt,
                lt.MatmulDescSetAttribute(d.op, kDescBiasDataType, &bias_type,
                                          sizeof(bias_type)),
                "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)"));
  }
  RETURN_IF_ERROR(MakeLayout(lt, p, p.a, &d.a));
  RETURN_IF_ERROR(MakeLayout(lt, p, p.b, &d.b));
  return MakeLayout(lt, p, p.c, &d.c);
}

struct Algo {
  bool found = false;
  LtAlgo algo = {};
  size_t workspace_bytes = 0;
};

}  // namespace

struct CublasLtGemm::Impl {
  const Api* lt = nullptr;
  Backend* backend = nullptr;
  LtHandle handle = nullptr;

  std::mutex mu;
  absl::flat_hash_map<AlgoKey, Algo> algos;  // guarded by mu
  // By (stream, capture); see Run.
  absl::flat_hash_map<std::pair<Stream, uint64_t>, void*>
      workspaces;  // guarded by mu
  struct Kernel {
    std::shared_ptr<LoadedModule> module;
    KernelHandle fn;
  };
  absl::flat_hash_map<std::pair<DType, GemmActivation>, Kernel>
      kernels;  // guarded by mu

  absl::StatusOr<Algo> FindAlgo(const LtPlan& p, const Descriptors& d);
  absl::StatusOr<void*> Workspace(Stream stream, uint64_t capture);
  absl::StatusOr<KernelHandle> EpilogueKernel(DType dtype,
                                              GemmActivation activation);
  absl::Status RunPost(const LtPlan& p, const cpu::GemmArgs& g, Stream stream);
};

absl::StatusOr<Algo> CublasLtGemm::Impl::FindAlgo(const LtPlan& p,
                                                  const Descriptors& d) {
  const AlgoKey key = KeyOf(p);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = algos.find(key);
    if (it != algos.end()) return it->second;
  }
  LtPreference pref = nullptr;
  RETURN_IF_ERROR(LtCheck(*lt, lt->MatmulPreferenceCreate(&pref),
                          "cublasLtMatmulPreferenceCreate"));
  struct PrefGuard {
    const Api* lt;
    LtPreference pref;
    ~PrefGuard() { lt->MatmulPreferenceDestroy(pref); }
  } guard{lt, pref};
  const uint64_t workspace = kWorkspaceBytes;
  RETURN_IF_ERROR(
      LtCheck(*lt,
              lt->MatmulPreferenceSetAttribute(pref, kPrefMaxWorkspaceBytes,
                                               &workspace, sizeof(workspace)),
              "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)"));
  const std::pair<int, const void*> aligned[] = {{kPrefMinAlignmentA, p.a.ptr},
                                                 {kPrefMinAlignmentB, p.b.ptr},
                                                 {kPrefMinAlignmentC, p.c.ptr},
                                                 {kPrefMinAlignmentD, p.c.ptr}};
  for (const auto& [attr, ptr] : aligned) {
    const uint32_t bytes = Alignment(ptr);
    RETURN_IF_ERROR(LtCheck(
        *lt,
        lt->MatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes)),
        "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)"));
  }
  LtHeuristicResult result = {};
  int count = 0;
  const LtStatus s = lt->MatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c,
                                                d.c, pref, 1, &result, &count);
  Algo algo;
  if (s == kLtSuccess && count > 0 && result.state == kLtSuccess) {
    algo.found = true;
    algo.algo = result.algo;
    algo.workspace_bytes = result.workspace_size;
  } else if (s != kLtSuccess && s != kLtNotSupported) {
    return LtCheck(*lt, s, "cublasLtMatmulAlgoGetHeuristic");
  }
  std::lock_guard<std::mutex> lock(mu);
  algos.emplace(key, algo);
  return algo;
}

absl::StatusOr<void*> CublasLtGemm::Impl::Workspace(Stream stream,
                                                    uint64_t capture) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = workspaces.find({stream, capture});
  if (it != workspaces.end()) return it->second;
  // One per stream: GEMMs on different streams may run at once.
  ASSIGN_OR_RETURN(void* w, backend->DeviceAlloc(kWorkspaceBytes));
  workspaces.emplace(std::make_pair(stream, capture), w);
  return w;
}

absl::StatusOr<KernelHandle> CublasLtGemm::Impl::EpilogueKernel(
    DType dtype, GemmActivation activation) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = kernels.find({dtype, activation});
  if (it != kernels.end()) return it->second.fn;
  const EpilogueKernelSource src = GemmEpilogueKernel(dtype, activation);
  ASSIGN_OR_RETURN(std::shared_ptr<LoadedModule> module,
                   backend->LoadSource(src.source, src.name, {src.name}));
  ASSIGN_OR_RETURN(KernelHandle fn, module->Function(src.name));
  kernels.emplace(std::make_pair(dtype, activation),
                  Kernel{std::move(module), fn});
  return fn;
}

absl::Status CublasLtGemm::Impl::RunPost(const LtPlan& p,
                                         const cpu::GemmArgs& g,
                                         Stream stream) {
  if (p.post_bias == nullptr && p.post_activation == GemmActivation::kNone &&
      !(p.skip_product && !g.accumulate)) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(KernelHandle fn, EpilogueKernel(g.dtype, p.post_activation));
  void* c = g.c;
  const void* bias = p.post_bias;
  long long rows = g.m, cols = g.n, ldc = g.ldc;
  long long stride_c = g.batch > 1 ? g.stride_c : 0, batch = g.batch;
  int keep_c = p.skip_product ? (g.accumulate ? 1 : 0) : 1;
  void* params[] = {&c, &bias, &rows, &cols, &ldc, &stride_c, &batch, &keep_c};
  const BackendLimits limits = backend->Limits();
  const int block = std::min(limits.preferred_block, limits.max_block);
  const int64_t total = static_cast<int64_t>(rows) * cols * batch;
  const int64_t grid =
      std::min<int64_t>((total + block - 1) / block,
                        std::min<int64_t>(limits.max_grid, int64_t{1} << 16));
  return backend->Launch(fn, grid, block, params, stream);
}

CublasLtGemm::CublasLtGemm(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

CublasLtGemm::~CublasLtGemm() {
  for (const auto& [key, w] : impl_->workspaces)
    impl_->backend->DeviceFree(w).IgnoreError();
  impl_->lt->Destroy(impl_->handle);
}

absl::Status CublasLtGemm::ReleaseStream(Stream stream) {
  void* w = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->workspaces.find({stream, uint64_t{0}});
    if (it == impl_->workspaces.end()) return absl::OkStatus();
    w = it->second;
    impl_->workspaces.erase(it);
  }
  return impl_->backend->DeviceFree(w);
}

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(
    Backend* backend) {
  ASSIGN_OR_RETURN(const CublasLtLibrary* library, LoadCublasLt());
  auto impl = std::make_unique<Impl>();
  impl->lt = library->api;
  impl->backend = backend;
  RETURN_IF_ERROR(
      LtCheck(*impl->lt, impl->lt->Create(&impl->handle), "cublasLtCreate"));
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(std::move(impl)));
}

absl::Status CublasLtGemm::Run(const DeviceGemmArgs& args, Stream stream,
                               uint64_t capture) {
  Impl& s = *impl_;
  ASSIGN_OR_RETURN(LtPlan plan, PlanLtGemm(args));
  if (plan.no_work) return absl::OkStatus();
  if (!plan.skip_product) {
    auto d = std::make_unique<Descriptors>();
    RETURN_IF_ERROR(MakeDescriptors(*s.lt, plan, *d));
    ASSIGN_OR_RETURN(Algo algo, s.FindAlgo(plan, *d));
    if (!algo.found && plan.epilogue != LtEpilogue::kDefault) {
      // No kernel with this epilogue for these types (f64, say): the plain
      // product, then bias and activation in our kernel.
      ASSIGN_OR_RETURN(plan, PlanLtGemm(args, /*fuse_epilogue=*/false));
      d = std::make_unique<Descriptors>();
      RETURN_IF_ERROR(MakeDescriptors(*s.lt, plan, *d));
      ASSIGN_OR_RETURN(algo, s.FindAlgo(plan, *d));
    }
    if (!algo.found) {
      return absl::UnimplementedError(absl::StrCat(
          "cuBLASLt has no algorithm for a ", ir::DTypeName(args.gemm.dtype),
          " GEMM m=", args.gemm.m, " n=", args.gemm.n, " k=", args.gemm.k,
          " batch=", args.gemm.batch, " on this device"));
    }
    void* workspace = nullptr;
    if (algo.workspace_bytes > 0) {
      ASSIGN_OR_RETURN(workspace, s.Workspace(stream, capture));
    }
    const float alpha32 = static_cast<float>(plan.alpha);
    const float beta32 = static_cast<float>(plan.beta);
    const bool f64 = plan.scale_type == LtDataType::kF64;
    const void* alpha = f64 ? static_cast<const void*>(&plan.alpha) : &alpha32;
    const void* beta = f64 ? static_cast<const void*>(&plan.beta) : &beta32;
    RETURN_IF_ERROR(LtCheck(
        *s.lt,
        s.lt->Matmul(s.handle, d->op, alpha, plan.a.ptr, d->a, plan.b.ptr, d->b,
                     beta, plan.c.ptr, d->c, const_cast<void*>(plan.c.ptr),
                     d->c, &algo.algo, workspace, algo.workspace_bytes,
                     reinterpret_cast<void*>(stream)),
        absl::StrCat("cublasLtMatmul(m=", plan.m, " n=", plan.n, " k=", plan.k,
                     " batch=", plan.batch, ")")));
  }
  return s.RunPost(plan, args.gemm, stream);
}

}  // namespace stepjit::runtime::cuda
