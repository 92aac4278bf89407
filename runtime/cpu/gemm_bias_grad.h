// The bias gradient a GEMM call writes beside its product
// (GemmArgs::bias_grad).
#ifndef STEPJIT_RUNTIME_CPU_GEMM_BIAS_GRAD_H_
#define STEPJIT_RUNTIME_CPU_GEMM_BIAS_GRAD_H_

#include "absl/status/status.h"
#include "runtime/cpu/gemm.h"

namespace stepjit::runtime::cpu {

// InvalidArgumentError for a bias gradient asked of a batch (batch != 1), or
// of a null A that has terms (m > 0 and k > 0). OK without bias_grad.
absl::Status ValidateBiasGrad(const GemmArgs& g);

// bias_grad[i] = sum over l < k of op(A)[i, l] for i < m: accumulated in
// double, as the CPU sum kernel does, and rounded once to `dtype`. Needs
// arguments that passed Validate and ValidateBiasGrad.
void ComputeBiasGrad(const GemmArgs& g);

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_RUNTIME_CPU_GEMM_BIAS_GRAD_H_
