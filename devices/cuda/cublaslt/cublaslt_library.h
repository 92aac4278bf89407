// LoadCublasLt: the cuBLASLt shared library, opened with dlopen at run time.
//
// stepjit has no link-time dependency on cuBLASLt, so binaries start on
// machines without it; the library is looked for on the first call.
#ifndef STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_LIBRARY_H_
#define STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_LIBRARY_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace stepjit::runtime::cuda {

// The cuBLASLt shared library, opened once per process.
struct CublasLtLibrary {
  std::string path;          // the file dlopen found
  size_t version = 0;        // cublasLtGetVersion(), e.g. 130002
  struct Api;                // devices/cuda/cublaslt/cublaslt_api.h
  const Api* api = nullptr;  // every entry point stepjit calls
};
// Tries libcublasLt.so.13, .so.12 and .so on the loader's path, then in
// /usr/local/cuda/lib64 and beside the libnvrtc this binary loaded. Needs no
// GPU. NotFound naming every path tried; Internal for a library lacking a
// symbol.
absl::StatusOr<const CublasLtLibrary*> LoadCublasLt();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_LIBRARY_H_
