// The hand-written CUDA one_hot (f32, f64, f16, bf16); the other row ops of
// a classifier's loss are generated (runtime/cuda/ops.cc).
//
// Unlike the CPU kernel, it cannot stop the program on a bad index: an
// out-of-range one_hot index leaves its row zero.
#ifndef STEPJIT_RUNTIME_CUDA_KERNELS_ROW_OPS_H_
#define STEPJIT_RUNTIME_CUDA_KERNELS_ROW_OPS_H_

#include "runtime/cuda/backend.h"
#include "runtime/dispatch.h"

namespace stepjit::runtime::cuda {

// The ops RunRowOp may run on the device.
bool IsRowOp(ir::OpId op);
// Runs `k` on the device and returns true, or false when these dtypes are
// not covered (the caller then runs the op on the host).
bool RunRowOp(Backend& b, const KernelArgs& k);

// The module's CUDA C, for tests that compile every kernel with NVRTC.
const char* RowKernelSource();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_RUNTIME_CUDA_KERNELS_ROW_OPS_H_
