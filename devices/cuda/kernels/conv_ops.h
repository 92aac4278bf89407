// Hand-written CUDA kernels for conv2d, max_pool2d, avg_pool2d and their
// gradients (f32, f64, f16, bf16): one thread per result element, each
// summing what reaches it (no atomics), so results do not depend on the
// schedule.
#ifndef STEPJIT_DEVICES_CUDA_KERNELS_CONV_OPS_H_
#define STEPJIT_DEVICES_CUDA_KERNELS_CONV_OPS_H_

#include "devices/cuda/backend.h"
#include "devices/cuda/ops.h"
#include "runtime/dispatch.h"

namespace stepjit::runtime::cuda {

// Sets the device paths of the ops this module runs (conv2d,
// conv2d_backward_input, conv2d_backward_weight, max_pool2d,
// max_pool2d_backward, avg_pool2d and avg_pool2d_backward).
void AddConvPaths(DevicePaths& paths);

// The module's CUDA C, for tests that compile every kernel with NVRTC.
const char* ConvKernelSource();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_KERNELS_CONV_OPS_H_
