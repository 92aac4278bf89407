// Layout copies, fills and host<->device copies of CUDA tensors.
#ifndef STEPJIT_DEVICES_CUDA_KERNELS_COPY_H_
#define STEPJIT_DEVICES_CUDA_KERNELS_COPY_H_

#include <cstdint>

#include "absl/types/span.h"
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

// A tensor's layout over the copied shape as the copy kernels take it
// (elements; a broadcast dim has stride 0), up to 8 dims.
struct CopyLayout {
  static constexpr int kMaxRank = 8;  // the kernels' SjLayout
  long long size[kMaxRank];
  long long stride[kMaxRank];
  int rank = 0;
};
// Merges neighbouring dims that are one run of elements in every one of
// `layouts` (all over the same sizes) and drops dims of size 1, so that the
// kernels divide fewer digits out of each element's index.
void CoalesceCopyLayouts(absl::Span<CopyLayout* const> layouts);
// 32 when the copy kernels may do their index arithmetic in 32 bits for `n`
// elements over `layouts` (the count and every offset below 2^31, no
// negative stride), else 64.
int CopyIndexBits(int64_t n, absl::Span<const CopyLayout* const> layouts);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_KERNELS_COPY_H_
