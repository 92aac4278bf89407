// NVRTC: generated CUDA C -> cubin (and PTX) for one GPU architecture,
// through the kernel cache. Needs no GPU and no driver.
#ifndef STEPJIT_CODEGEN_CUDA_NVRTC_H_
#define STEPJIT_CODEGEN_CUDA_NVRTC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codegen/kernel_cache.h"

namespace stepjit::codegen::cuda {

// Whether NVRTC is there: the build found the CUDA Toolkit's headers and
// libnvrtc was opened at run time ($STEPJIT_NVRTC_LIBRARY, the loader's
// path, or the toolkit the build was configured with). Without it
// CompileCuda returns Unimplemented and CUDA C is only generated.
bool NvrtcAvailable();
// Whether this build was configured with NVRTC's headers (the CUDA Toolkit
// or STEPJIT_NVRTC_ROOT). Such a build that cannot open libnvrtc at run time
// is broken, not merely CPU-only: its tests fail instead of skipping.
bool NvrtcConfigured();
// The libnvrtc loaded (empty when none), and why none was.
std::string NvrtcLibraryPath();
std::string NvrtcUnavailableReason();
// "NVRTC 13.0", or "NVRTC unavailable": part of every cache key.
std::string NvrtcCompilerId();
// The real architectures this NVRTC compiles for, e.g. {"sm_75", ..., "sm_90"}.
std::vector<std::string> NvrtcSupportedArchs();

struct NvrtcOptions {
  std::string arch = "sm_90";  // a real architecture: sm_80, sm_90, ...
  bool want_ptx = false;       // also return the PTX (for STEPJIT_DUMP)
  bool use_cache = true;
  KernelCache* cache = nullptr;  // null: KernelCache::Global()
};

struct CompiledCuda {
  std::string cubin;
  std::string ptx;  // empty unless want_ptx
  std::string log;  // NVRTC's warnings, if any (empty on a cache hit)
  bool cache_hit = false;
  double compile_ms = 0;  // NVRTC time, or the cache lookup
};

// Where CUDA libraries and headers may be installed, shared by the searches
// for NVRTC's headers (below) and for NCCL (devices/cuda/nccl): the roots
// $CUDA_HOME, $CUDA_PATH, /usr/local/cuda in that order, and the
// site-packages folders of $VIRTUAL_ENV (lib/python3*/site-packages) that
// exist, where NVIDIA's PyPI wheels install.
std::vector<std::string> CudaInstallRoots();
std::vector<std::string> VirtualEnvSitePackages();

// The CUDA headers the kernels include (cuda_fp16.h and cuda_bf16.h: NVRTC
// 13 has no built-in copy of either), found at run time, not where the
// build was configured: the machine that runs the kernels may keep its
// toolkit elsewhere, or have only NVIDIA's PyPI wheels or a bundle.
struct CudaHeaders {
  std::string dir;                 // the first candidate with both; "" if none
  std::vector<std::string> tried;  // every candidate looked at, in order
  // Why there is none: the candidates and what each lacked.
  std::string error;
};
// The candidates, in order: $STEPJIT_CUDA_INCLUDE; the include/ beside the
// libnvrtc loaded (a toolkit's lib64/ or a wheel's nvidia/cu13/lib/); the
// include/ beside the running executable's directory (a bundle's bin/);
// $CUDA_HOME/include, $CUDA_PATH/include, /usr/local/cuda/include; the
// wheels of $VIRTUAL_ENV; the directory this build was configured with.
std::vector<std::string> CudaHeaderCandidates();
// The first of `candidates` holding both headers.
CudaHeaders FindCudaHeaders(const std::vector<std::string>& candidates);
// FindCudaHeaders(CudaHeaderCandidates()), searched once per process.
const CudaHeaders& FoundCudaHeaders();

// The flags every compile for `arch` uses (and keys the cache with). IEEE
// arithmetic as on the CPU: no --use_fast_math, and --fmad=false so that
// a * b + c is never contracted into one differently rounded FMA; -I the
// headers found (FoundCudaHeaders), when there are.
std::vector<std::string> NvrtcFlags(absl::string_view arch);

// Compiles one translation unit; `name` names it in NVRTC's messages.
// InvalidArgument with NVRTC's log when the source does not compile (or the
// arch is not one NVRTC knows), Unimplemented without NVRTC,
// FailedPrecondition when the source includes cuda_fp16.h or cuda_bf16.h
// and no candidate has them (naming every path tried), Internal for other
// NVRTC failures. Never aborts.
absl::StatusOr<CompiledCuda> CompileCuda(absl::string_view source,
                                         absl::string_view name,
                                         const NvrtcOptions& options = {});

}  // namespace stepjit::codegen::cuda

#endif  // STEPJIT_CODEGEN_CUDA_NVRTC_H_
