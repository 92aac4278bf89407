// The bias gradient a GEMM call writes beside its product
// (GemmArgs::bias_grad).
#ifndef STEPJIT_DEVICES_CPU_GEMM_BIAS_GRAD_H_
#define STEPJIT_DEVICES_CPU_GEMM_BIAS_GRAD_H_

#include "devices/cpu/gemm.h"

namespace stepjit::runtime::cpu {

// bias_grad[i] = sum over l < k of op(A)[i, l] for i < m: accumulated in
// double, as the CPU sum kernel does, and rounded once to `dtype`. Needs
// arguments that passed ValidateGemmArgs (runtime/gemm_args.h).
void ComputeBiasGrad(const GemmArgs& g);

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_DEVICES_CPU_GEMM_BIAS_GRAD_H_
