// The region backends every process has: the CPU (LLVM ORC) and CUDA
// (NVRTC) ones, and the CUDA C dumper (program/region_backend.h).
#ifndef STEPJIT_PROGRAM_BUILTIN_BACKENDS_H_
#define STEPJIT_PROGRAM_BUILTIN_BACKENDS_H_

#include "absl/functional/function_ref.h"
#include "program/region_backend.h"

namespace stepjit::runtime {

// Called once, when the registry is first used. Listed here rather than
// registered by static initializers, which a static library's link drops.
void RegisterBuiltinRegionBackends(
    absl::FunctionRef<void(DeviceType, RegionBackendFactory)> add_backend,
    absl::FunctionRef<void(RegionSourceDumper)> add_dumper);

}  // namespace stepjit::runtime

#endif  // STEPJIT_PROGRAM_BUILTIN_BACKENDS_H_
