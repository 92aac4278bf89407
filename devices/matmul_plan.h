// The GEMM arguments of an eager matmul (strided and batched operands, an
// absorbed bias and activation or bias gradient), shared by the CPU and CUDA
// kernels.
#ifndef STEPJIT_DEVICES_MATMUL_PLAN_H_
#define STEPJIT_DEVICES_MATMUL_PLAN_H_

#include <vector>

#include "devices/cpu/gemm.h"
#include "runtime/dispatch.h"

namespace stepjit::runtime {

struct MatmulPlan {
  cpu::GemmArgs gemm;
  std::vector<Tensor> keep;  // the tensors gemm's pointers refer to
  bool empty = false;        // nothing to compute (a zero-sized dim)
  // Batch dims that do not collapse to one stride (attention's [B, H]
  // over a permuted [B, T, H, D] tensor) but split into an outer and an
  // inner group that each do: `outer` calls of gemm's batch, the i-th with
  // its pointers moved by i times these element strides.
  int64_t outer = 1;
  int64_t outer_stride_a = 0, outer_stride_b = 0, outer_stride_c = 0;
  // The i-th call's arguments, i in [0, outer).
  cpu::GemmArgs Call(int64_t i) const;
};

// Copies `src` into the same-shaped, same-device `dst` (layout changes only).
using CopyFn = void (*)(const Tensor& dst, const Tensor& src);

// Operands whose layout a GEMM cannot read (not row- or column-major, or
// batch dims that collapse neither to one stride nor to two) are copied to
// contiguous buffers with `copy`. With `one_call`, batch dims that do not
// collapse to one stride are copied too, so that the plan is one strided-
// batched GEMM (outer == 1): on a GPU one copy kernel and one call over all
// of attention's B * H products beat B calls of H small ones. A
// second result (k.more_out, the bias gradient) becomes gemm.bias_grad.
// Refuses (stepjit::Error) a 3-operand or 2-result matmul whose inputs
// require grad while grad mode is on: neither has a gradient rule.
MatmulPlan PlanMatmul(const KernelArgs& k, CopyFn copy, bool one_call = false);

}  // namespace stepjit::runtime

#endif  // STEPJIT_DEVICES_MATMUL_PLAN_H_
