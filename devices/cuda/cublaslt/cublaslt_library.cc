// LoadCublasLt: finds and opens cuBLASLt, resolves its entry points, and
// turns its status codes into absl statuses.
#include "devices/cuda/cublaslt/cublaslt_library.h"

#include <dlfcn.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/nvrtc.h"
#include "devices/cuda/cublaslt/cublaslt_api.h"
#include "devices/cuda/dl_library.h"
#include "ir/status.h"

// The mirrored constants are checked against cuBLASLt's header when the
// toolkit has it (NVRTC from PyPI wheels comes without it).
#if defined(STEPJIT_HAVE_NVRTC) && __has_include(<cublasLt.h>)
#define STEPJIT_CHECK_CUBLASLT_ABI 1
#include <cublasLt.h>
#endif

namespace stepjit::runtime::cuda {

namespace {

#ifdef STEPJIT_CHECK_CUBLASLT_ABI
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

// Where to look, in order: the loader's path, then the toolkit and the
// directory of the NVRTC loaded.
std::vector<std::string> Candidates() {
  const char* names[] = {"libcublasLt.so.13", "libcublasLt.so.12",
                         "libcublasLt.so"};
  std::vector<std::string> dirs = {"", "/usr/local/cuda/lib64/"};
  if (std::string dir = codegen::cuda::NvrtcLibraryPath(); !dir.empty()) {
    dir.erase(dir.find_last_of('/') + 1);
    if (!dir.empty() && dir != dirs[1]) dirs.push_back(dir);
  }
  std::vector<std::string> out;
  for (const std::string& dir : dirs)
    for (const char* name : names) out.push_back(absl::StrCat(dir, name));
  return out;
}

absl::StatusOr<CublasLtLibrary*> OpenCublasLt() {
  ASSIGN_OR_RETURN(const DlOpened opened,
                   DlOpenFirstOrNotFound(Candidates(), "cuBLASLt not found"));
  void* lib = opened.handle;
  const std::string& path = opened.path;
  auto* api = new CublasLtLibrary::Api;
  const DlSymbol symbols[] = {
      {"cublasLtCreate", DlResolve(lib, "cublasLtCreate", api->Create)},
      {"cublasLtDestroy", DlResolve(lib, "cublasLtDestroy", api->Destroy)},
      {"cublasLtGetVersion",
       DlResolve(lib, "cublasLtGetVersion", api->GetVersion)},
      {"cublasLtGetStatusName",
       DlResolve(lib, "cublasLtGetStatusName", api->GetStatusName)},
      {"cublasLtGetStatusString",
       DlResolve(lib, "cublasLtGetStatusString", api->GetStatusString)},
      {"cublasLtMatmulDescCreate",
       DlResolve(lib, "cublasLtMatmulDescCreate", api->MatmulDescCreate)},
      {"cublasLtMatmulDescDestroy",
       DlResolve(lib, "cublasLtMatmulDescDestroy", api->MatmulDescDestroy)},
      {"cublasLtMatmulDescSetAttribute",
       DlResolve(lib, "cublasLtMatmulDescSetAttribute",
                 api->MatmulDescSetAttribute)},
      {"cublasLtMatrixLayoutCreate",
       DlResolve(lib, "cublasLtMatrixLayoutCreate", api->MatrixLayoutCreate)},
      {"cublasLtMatrixLayoutDestroy",
       DlResolve(lib, "cublasLtMatrixLayoutDestroy", api->MatrixLayoutDestroy)},
      {"cublasLtMatrixLayoutSetAttribute",
       DlResolve(lib, "cublasLtMatrixLayoutSetAttribute",
                 api->MatrixLayoutSetAttribute)},
      {"cublasLtMatmulPreferenceCreate",
       DlResolve(lib, "cublasLtMatmulPreferenceCreate",
                 api->MatmulPreferenceCreate)},
      {"cublasLtMatmulPreferenceDestroy",
       DlResolve(lib, "cublasLtMatmulPreferenceDestroy",
                 api->MatmulPreferenceDestroy)},
      {"cublasLtMatmulPreferenceSetAttribute",
       DlResolve(lib, "cublasLtMatmulPreferenceSetAttribute",
                 api->MatmulPreferenceSetAttribute)},
      {"cublasLtMatmulAlgoGetHeuristic",
       DlResolve(lib, "cublasLtMatmulAlgoGetHeuristic",
                 api->MatmulAlgoGetHeuristic)},
      {"cublasLtMatmul", DlResolve(lib, "cublasLtMatmul", api->Matmul)},
  };
  if (const char* missing = DlFirstMissing(symbols)) {
    delete api;
    dlclose(lib);
    return absl::InternalError(absl::StrCat(path, " has no ", missing,
                                            "; expected cuBLASLt 12 or newer"));
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

absl::Status LtCheck(const CublasLtLibrary::Api& lt, LtStatus s,
                     absl::string_view call) {
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

}  // namespace stepjit::runtime::cuda
