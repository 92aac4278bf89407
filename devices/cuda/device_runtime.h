// The CUDA DeviceRuntime: eager CUDA ops (devices/cuda/ops.h), transfers
// to and from the host, device memory from the caching allocator on the
// current stream and page-locked host memory from the pinned pool. Every
// call that needs the device finds the process's backend (a GPU through
// the driver, or the host emulator) and throws Error when there is none.
#ifndef STEPJIT_DEVICES_CUDA_DEVICE_RUNTIME_H_
#define STEPJIT_DEVICES_CUDA_DEVICE_RUNTIME_H_

#include "runtime/device_runtime.h"

namespace stepjit::runtime::cuda {

const DeviceRuntime& Runtime();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_DEVICE_RUNTIME_H_
