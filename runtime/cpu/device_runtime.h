// The CPU's DeviceRuntime: the eager reference kernels, strided copies and
// 64-byte aligned host memory with live/peak accounting.
#ifndef STEPJIT_RUNTIME_CPU_DEVICE_RUNTIME_H_
#define STEPJIT_RUNTIME_CPU_DEVICE_RUNTIME_H_

#include "runtime/device_runtime.h"

namespace stepjit::runtime::cpu {

const DeviceRuntime& Runtime();

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_RUNTIME_CPU_DEVICE_RUNTIME_H_
