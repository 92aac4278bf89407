// LoadNccl: NCCL (libnccl.so.2), opened with dlopen at run time.
//
// stepjit has no link-time dependency on NCCL, so binaries start where it
// is missing; collectives on CUDA tensors then take the host-staging path
// (devices/cuda/kernels/collective_ops.h). Opening NCCL needs no GPU.
#ifndef STEPJIT_DEVICES_CUDA_NCCL_NCCL_LIBRARY_H_
#define STEPJIT_DEVICES_CUDA_NCCL_NCCL_LIBRARY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "devices/cuda/nccl/nccl_api.h"

namespace stepjit::runtime::cuda {

// The NCCL shared library, opened once per process.
struct NcclLibrary {
  std::string path;  // the file dlopen found
  int version = 0;   // ncclGetVersion(), e.g. 22809 for 2.28.9
  nccl::Api api;     // every entry point stepjit calls
  // "2.28.9".
  std::string VersionString() const;
};

// Where LoadNccl looks, in order: $STEPJIT_NCCL_LIBRARY alone when set (an
// explicit choice is not second-guessed); else libnccl.so.2 on the loader's
// path, in the CUDA installation ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda:
// lib64/ and lib/), beside the libnvrtc stepjit loaded, and in NVIDIA's
// PyPI wheel layout (<site-packages>/nvidia/nccl/lib/) of the NVRTC wheel's
// site-packages, of $VIRTUAL_ENV and of the project's .venv-cuda.
std::vector<std::string> NcclCandidates();

// Opens NCCL from NcclCandidates(), once per process (the result, found or
// not, is kept). NotFound naming every path tried and how to install NCCL;
// FailedPrecondition for a library older than 2.10 or lacking a symbol.
absl::StatusOr<const NcclLibrary*> LoadNccl();
// The same search, not cached, for tests that change STEPJIT_NCCL_LIBRARY.
// The library found stays open (dlopen); the caller owns the entry points.
absl::StatusOr<std::unique_ptr<const NcclLibrary>> LoadNcclUncached();

// OK for ncclSuccess; otherwise "<call>: <ncclGetErrorString> (ncclResult
// N)" as Internal, InvalidArgument (invalid argument or usage) or
// Unavailable (a remote or system error: a peer or the network failed).
absl::Status NcclStatus(const NcclLibrary& lib, nccl::Result result,
                        absl::string_view call);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_NCCL_NCCL_LIBRARY_H_
