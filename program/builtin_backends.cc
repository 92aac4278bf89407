// The built-in region backends, one line per device.
#include "program/builtin_backends.h"

#include "program/cpu/cpu_backend.h"
#include "program/cuda/cuda_backend.h"

namespace stepjit::runtime {

void RegisterBuiltinRegionBackends(
    absl::FunctionRef<void(DeviceType, RegionBackendFactory)> add_backend,
    absl::FunctionRef<void(RegionSourceDumper)> add_dumper) {
  add_backend(DeviceType::kCPU, cpu::MakeCpuRegionBackend);
  add_backend(DeviceType::kCUDA, cuda::MakeCudaRegionBackend);
  add_dumper(cuda::DumpCudaRegionSources);
}

}  // namespace stepjit::runtime
