// cuBLASLt's C ABI as stepjit declares it, for use without the toolkit.
//
// The library is opened with dlopen (devices/cuda/cublaslt/cublaslt_library.h),
// so its types, constants and entry points are declared here rather than taken
// from cublasLt.h, which a build may lack; cublaslt_library.cc checks them
// against that header when the build has the CUDA Toolkit.
#ifndef STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_API_H_
#define STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_API_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "devices/cuda/cublaslt/cublaslt_library.h"

namespace stepjit::runtime::cuda {

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

// OK for CUBLAS_STATUS_SUCCESS; otherwise the status's name and text after
// `call`, as the absl code closest to its meaning.
absl::Status LtCheck(const CublasLtLibrary::Api& lt, LtStatus s,
                     absl::string_view call);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_API_H_
