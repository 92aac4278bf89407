// Layout copies, fills and host<->device copies of CUDA tensors.
#ifndef STEPJIT_DEVICES_CUDA_KERNELS_COPY_H_
#define STEPJIT_DEVICES_CUDA_KERNELS_COPY_H_

#include "devices/cuda/backend.h"
#include "runtime/tensor.h"

namespace stepjit::runtime::cuda {

// dst = src (the same dtype), src broadcast to dst's shape, any strides; a
// device-to-device memcpy when both are contiguous and of one shape.
void CopySameDType(const Tensor& dst, const Tensor& src);
// Every element of dst (any strides) = value, rounded as the CPU's fill
// rounds it.
void Fill(const Tensor& dst, double value);
// `t`, or a contiguous copy of it on its device.
Tensor ContiguousOnDevice(const Tensor& t);

// `t` on `device` (t itself when already there). Host<->device copies are
// queued on the current stream; with non_blocking the call may return
// before the copy ran when the host side is pinned (a device-to-host copy
// then lands in new pinned memory): synchronize before reading it.
Tensor ToDevice(const Tensor& t, Device device, bool non_blocking = false);

// The copy and fill kernels' CUDA C, for tests that compile every kernel
// with NVRTC.
const char* CopyKernelSource();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_KERNELS_COPY_H_
