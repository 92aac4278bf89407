// STEPJIT_DUMP for CUDA kernels: each region's CUDA C as <dir>/<name>.cu and,
// when asked, its PTX as <dir>/<name>.ptx.
#ifndef STEPJIT_CODEGEN_CUDA_DUMP_H_
#define STEPJIT_CODEGEN_CUDA_DUMP_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/nvrtc.h"

namespace stepjit::codegen::cuda {

// Writes <dir>/<kernel>.cu, and <dir>/<kernel>.ptx when `ptx` is not empty,
// creating `dir` if needed. Internal error naming the path when a write fails.
absl::Status DumpCudaKernel(const std::string& dir, absl::string_view kernel,
                            absl::string_view source,
                            absl::string_view ptx = {});

// Dumps `region` under its name. With `ptx_options` the PTX is compiled (or
// taken from the cache) for that arch too; a build without NVRTC writes the
// .cu alone. A compile error is returned after the .cu is written.
absl::Status DumpRegion(const std::string& dir, const RegionSource& region,
                        const NvrtcOptions* ptx_options = nullptr);

}  // namespace stepjit::codegen::cuda

#endif  // STEPJIT_CODEGEN_CUDA_DUMP_H_
