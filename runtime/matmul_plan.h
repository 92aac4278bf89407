// The GEMM arguments of an eager matmul (strided and batched operands, an
// absorbed bias and activation or bias gradient), shared by the CPU and CUDA
// kernels.
#ifndef STEPJIT_RUNTIME_MATMUL_PLAN_H_
#define STEPJIT_RUNTIME_MATMUL_PLAN_H_

#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/dispatch.h"

namespace stepjit::runtime {

struct MatmulPlan {
  cpu::GemmArgs gemm;
  std::vector<Tensor> keep;  // the tensors gemm's pointers refer to
  bool empty = false;        // nothing to compute (a zero-sized dim)
};

// Copies `src` into the same-shaped, same-device `dst` (layout changes only).
using CopyFn = void (*)(const Tensor& dst, const Tensor& src);

// Operands whose layout a GEMM cannot read (not row- or column-major, or no
// uniform batch stride) are copied to contiguous buffers with `copy`. A
// second result (k.more_out, the bias gradient) becomes gemm.bias_grad.
// Refuses (stepjit::Error) a 3-operand or 2-result matmul whose inputs
// require grad while grad mode is on: neither has a gradient rule.
MatmulPlan PlanMatmul(const KernelArgs& k, CopyFn copy);

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_MATMUL_PLAN_H_
