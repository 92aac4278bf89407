// The fiber scheduler that runs the blocks of a host-compiled kernel.
#ifndef STEPJIT_TESTING_CUDA_EMULATOR_HOST_FIBERS_H_
#define STEPJIT_TESTING_CUDA_EMULATOR_HOST_FIBERS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "testing/cuda_emulator/host_emulation_header.h"

namespace stepjit::codegen::cuda {

// Runs blocks 0..grid-1 of `block` threads (1..1024) of `kernel` on its
// packed arguments, one block after another on the calling thread; the
// threads of a block are fibers (ucontext) scheduled round robin, which let
// the next run only at __syncthreads and the warp shuffles. Kernels run one
// at a time process-wide. Internal, naming the kernel `name`, when a block
// deadlocks.
absl::Status RunOnFibers(const abi::sj_kernel_desc& kernel,
                         absl::string_view name, const void* packed,
                         unsigned grid, unsigned block);

}  // namespace stepjit::codegen::cuda

#endif  // STEPJIT_TESTING_CUDA_EMULATOR_HOST_FIBERS_H_
