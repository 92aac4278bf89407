// Registration of the eager CPU kernels, one function per kernel file.
#ifndef STEPJIT_DEVICES_CPU_KERNELS_H_
#define STEPJIT_DEVICES_CPU_KERNELS_H_

#include <vector>

#include "runtime/dispatch.h"

namespace stepjit::runtime::cpu {

using KernelTable = CpuKernel[ir::kNumOps];

void RegisterElementwiseKernels(KernelTable& table);
void RegisterReductionKernels(KernelTable& table);
void RegisterNnKernels(KernelTable& table);
void RegisterMatmulKernels(KernelTable& table);
void RegisterMiscKernels(KernelTable& table);
void RegisterSamplingKernels(KernelTable& table);
void RegisterConvKernels(KernelTable& table);

// Helpers for kernels. They never go through Dispatch, so a kernel's
// internal work is invisible to autograd and to dispatch observers.
// Strided copy with dtype conversion; src broadcasts to dst's shape.
void CopyInto(const Tensor& dst, const Tensor& src);
Tensor PermutedView(const Tensor& x, absl::Span<const int64_t> perm);
// The permutation that moves dim `d` of a rank-`rank` tensor last, keeping
// the others in order (row kernels work on that dim's rows).
std::vector<int64_t> DimLastPermutation(int64_t rank, int64_t d);
Tensor ContiguousCopyIfNeeded(const Tensor& x);
void FillWith(const Tensor& dst, double value);
// The view of slice_backward's output `out` that the gradient fills (the
// slice the forward took), for any device.
Tensor SliceBackwardWindow(const Tensor& out, const Tensor& grad, const ir::Attrs& attrs);
// The view of `t` holding indices [start, start + len) of dim `d` (made
// without Dispatch, so a tracer does not see it).
Tensor WindowAlong(const Tensor& t, int64_t d, int64_t start, int64_t len);
// cat on any device: each operand of `k` copied by `copy` (the device's
// converting copy) into its window of k.out along the op's dim.
void CopyIntoCatWindows(const KernelArgs& k,
                        void (*copy)(const Tensor& dst, const Tensor& src));

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_DEVICES_CPU_KERNELS_H_
