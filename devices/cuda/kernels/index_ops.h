// Hand-written CUDA kernels for embedding, embedding_backward,
// slice_backward, arange, argmax, var and topk, and cat as copies into windows
// (f32, f64, f16, bf16; i64 indices).
//
// Unlike the CPU kernels, they cannot stop the program on a bad index: an
// out-of-range embedding index reads a zero row, and embedding_backward
// drops its gradient.
#ifndef STEPJIT_DEVICES_CUDA_KERNELS_INDEX_OPS_H_
#define STEPJIT_DEVICES_CUDA_KERNELS_INDEX_OPS_H_

#include "devices/cuda/backend.h"
#include "devices/cuda/ops.h"
#include "runtime/dispatch.h"

namespace stepjit::runtime::cuda {

// Sets the device paths of the ops this module runs (embedding,
// embedding_backward, slice_backward, arange, argmax and var).
void AddIndexPaths(DevicePaths& paths);

// The module's CUDA C, for tests that compile every kernel with NVRTC.
const char* IndexKernelSource();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_KERNELS_INDEX_OPS_H_
