// Generated CUDA C run on the host: the kernels are compiled as host C++
// against an emulation of the CUDA built-ins they use, loaded with dlopen,
// and launched with each block's threads as cooperative fibers on the calling
// thread. This is what the host emulator backend (devices/cuda/
// emulator_backend.h) and the CUDA code generation tests run kernels with.
//
// Emulation model:
//   * blocks of a launch run one after another, so `__shared__` is a static
//     array; kernels run one at a time process-wide (a kernel's statics are
//     shared by all its launches);
//   * the threads of a block are fibers (ucontext) scheduled round robin on
//     the launching thread; __syncthreads and the warp shuffles are the only
//     points where one thread lets the next run. A thread that returned no
//     longer counts at barriers (as on sm_70+), and a block whose live
//     threads wait at barriers that can never complete is reported as a
//     deadlock instead of hanging;
//   * shuffle masks are not checked: every live lane of the warp takes part;
//   * atomics are plain read-modify-writes, which is atomic under this
//     scheduling;
//   * exp, log, tanh and f32 erf are the CPU kernels' (ir/poly_math.h),
//     so results match the CPU backend's bit for bit (a GPU's are CUDA's,
//     within a few ulps); the other math functions are the host's libm.
#ifndef STEPJIT_TESTING_CUDA_EMULATOR_HOST_EMULATION_H_
#define STEPJIT_TESTING_CUDA_EMULATOR_HOST_EMULATION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stepjit::codegen::cuda {

// The text of the header every host-compiled module is built against
// (force-included before the source); part of the kernel cache key.
const std::string& HostEmulationHeader();

// The host C++ compiler used (c++, g++ or clang++ from PATH, as an absolute
// path); empty when there is none.
const std::string& HostCompiler();

struct HostModuleState;
struct HostKernelEntry;

// One kernel of a loaded HostModule. Valid while the module is loaded.
class HostKernel {
 public:
  const std::string& name() const;
  // Bytes (and alignment, at most alignof(std::max_align_t)) of the packed
  // argument values PackArgs writes.
  size_t arg_bytes() const;
  size_t arg_align() const;
  // Copies the argument values into `out` (arg_bytes(), aligned to
  // arg_align()); `args[i]` points at argument i (cuLaunchKernel's
  // convention).
  void PackArgs(void* const* args, void* out) const;
  // Runs `grid` blocks of `block` threads (1..1024) with packed arguments.
  // InvalidArgument for a bad shape, Internal when a block deadlocks.
  absl::Status Run(const void* packed_args, int64_t grid, int block) const;
  // PackArgs and Run.
  absl::Status Launch(void* const* args, int64_t grid, int block) const;
  // Keeps the module loaded while the returned pointer lives.
  std::shared_ptr<const void> KeepLoaded() const;

 private:
  friend class HostModule;
  explicit HostKernel(const HostKernelEntry* entry) : entry_(entry) {}
  const HostKernelEntry* entry_;
};

// A translation unit of kernels compiled for the host and loaded; copies
// share the loaded library, which is unloaded with the last copy (and the
// last KeepLoaded pointer).
class HostModule {
 public:
  const std::string& name() const;
  // NotFound naming the kernel when it was not among `kernel_names`.
  absl::StatusOr<HostKernel> Kernel(absl::string_view name) const;

 private:
  friend absl::StatusOr<HostModule> CompileForHost(
      absl::string_view, absl::string_view, const std::vector<std::string>&);
  explicit HostModule(std::shared_ptr<HostModuleState> state)
      : state_(std::move(state)) {}
  std::shared_ptr<HostModuleState> state_;
};

// Compiles `source` (CUDA C with extern "C" __global__ kernels named in
// `kernel_names`) as host C++ with a launch wrapper per kernel, through the
// kernel cache (codegen/kernel_cache.h; the key holds the emulation header,
// the source, the compiler and its flags), and loads it. InvalidArgument
// with the start of the compiler's log when it does not compile (or a
// kernel is missing), FailedPrecondition when there is no host compiler.
// `name` names the module in messages and temporary files.
absl::StatusOr<HostModule> CompileForHost(
    absl::string_view source, absl::string_view name,
    const std::vector<std::string>& kernel_names);

}  // namespace stepjit::codegen::cuda

#endif  // STEPJIT_TESTING_CUDA_EMULATOR_HOST_EMULATION_H_
