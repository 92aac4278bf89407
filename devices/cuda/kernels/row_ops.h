// The hand-written CUDA one_hot (f32, f64, f16, bf16); the other row ops of
// a classifier's loss are generated (devices/cuda/ops.cc).
//
// Unlike the CPU kernel, it cannot stop the program on a bad index: an
// out-of-range one_hot index leaves its row zero.
#ifndef STEPJIT_DEVICES_CUDA_KERNELS_ROW_OPS_H_
#define STEPJIT_DEVICES_CUDA_KERNELS_ROW_OPS_H_

#include "devices/cuda/backend.h"
#include "devices/cuda/ops.h"
#include "runtime/dispatch.h"

namespace stepjit::runtime::cuda {

// Sets the device paths of the ops this module runs (one_hot).
void AddRowPaths(DevicePaths& paths);

// The module's CUDA C, for tests that compile every kernel with NVRTC.
const char* RowKernelSource();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_KERNELS_ROW_OPS_H_
