// The built-in region backends, one line per device.
#include "runtime/program/builtin_backends.h"

#include "runtime/cpu/program/cpu_backend.h"
#include "runtime/cuda/program/cuda_backend.h"

namespace stepjit::runtime {

void RegisterBuiltinRegionBackends(
    absl::FunctionRef<void(DeviceType, RegionBackendFactory)> add_backend,
    absl::FunctionRef<void(RegionSourceDumper)> add_dumper) {
  add_backend(DeviceType::kCPU, cpu::MakeCpuRegionBackend);
  add_backend(DeviceType::kCUDA, cuda::MakeCudaRegionBackend);
  add_dumper(cuda::DumpCudaRegionSources);
}

}  // namespace stepjit::runtime
