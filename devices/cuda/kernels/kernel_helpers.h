// CUDA C shared by the hand-written kernel modules: the half-precision
// headers, and loads/stores that convert as the CPU kernels' Convert does.
#ifndef STEPJIT_DEVICES_CUDA_KERNELS_KERNEL_HELPERS_H_
#define STEPJIT_DEVICES_CUDA_KERNELS_KERNEL_HELPERS_H_

#include <initializer_list>
#include <string>
#include <vector>

namespace stepjit::runtime::cuda {

// A hand-written module: compiled and loaded once per backend under `name`
// (devices/cuda/ops.h's LaunchFixed).
struct FixedModule {
  std::string name;
  std::string source;
  std::vector<std::string> kernels;
};

// sj_ld(x): a stored value in its compute type (f16/bf16 -> float);
// sj_put(p, v): stores v, rounding to nearest even for f16/bf16;
// sj_exp(x): expf or exp by precision; SJ_GRID_LOOP(i, n): a grid-stride
// loop over [0, n).
const std::string& KernelHelpers();

// KernelHelpers() + `body`, whose kernels are sj_<base>_<dtype> for every
// base and dtype f32, f64, f16, bf16, plus `extra`.
FixedModule FloatKernelModule(std::string name, const char* body,
                              std::initializer_list<const char*> bases,
                              std::initializer_list<const char*> extra = {});

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_KERNELS_KERNEL_HELPERS_H_
