// CUDA C shared by the hand-written kernel modules: the half-precision
// headers, and loads/stores that convert as the CPU kernels' Convert does.
#ifndef STEPJIT_RUNTIME_CUDA_KERNEL_HELPERS_H_
#define STEPJIT_RUNTIME_CUDA_KERNEL_HELPERS_H_

#include <string>

namespace stepjit::runtime::cuda {

// sj_ld(x): a stored value in its compute type (f16/bf16 -> float);
// sj_put(p, v): stores v, rounding to nearest even for f16/bf16;
// sj_exp(x): expf or exp by precision; SJ_GRID_LOOP(i, n): a grid-stride
// loop over [0, n).
const std::string& KernelHelpers();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_RUNTIME_CUDA_KERNEL_HELPERS_H_
