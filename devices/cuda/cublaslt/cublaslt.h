// CublasLtGemm: the driver backend's GEMMs, run by cuBLASLt on one device.
//
// Each GEMM is planned on the host (devices/cuda/cublaslt/cublaslt_plan.h), run
// by the library loaded at run time (devices/cuda/cublaslt/cublaslt_library.h),
// and finished, where cuBLASLt lacks the epilogue, by a kernel of ours
// (devices/cuda/cublaslt/cublaslt_epilogue.h).
#ifndef STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_H_
#define STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "devices/cuda/backend.h"

namespace stepjit::runtime::cuda {

// GEMMs through cuBLASLt on one device, queued on the caller's stream. The
// backend allocates the workspaces (32 MiB per stream and per capture) and
// loads the kernels for epilogues cuBLASLt lacks (exact GELU, bias
// gradients it cannot fuse); it must outlive this object, and its device
// context must be current on the calling thread.
// Algorithms are chosen by cuBLASLt's heuristic once per shape, layout,
// dtype, epilogue and pointer alignment.
class CublasLtGemm {
 public:
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(Backend* backend);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // `capture` numbers the graph capture in progress on `stream` (0: none).
  // A capture gets a workspace of its own, kept until ReleaseCapture: its
  // graph may be replayed on any stream, after `stream` is gone.
  // Descriptors and the heuristic's algorithm are made once per GEMM shape
  // (layouts, dtypes, epilogue, alignment) and reused.
  absl::Status Run(const DeviceGemmArgs& args, Stream stream,
                   uint64_t capture = 0);
  // Frees `stream`'s workspace (not its captures'), for a stream about to be
  // destroyed; its queued work must have finished.
  absl::Status ReleaseStream(Stream stream);
  // Frees capture `capture`'s workspace, for a graph that was destroyed;
  // no launch of it may still be running.
  absl::Status ReleaseCapture(uint64_t capture);

 private:
  struct Impl;
  explicit CublasLtGemm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_H_
