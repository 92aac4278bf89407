// The CPU's DeviceRuntime: the eager reference kernels, strided copies and
// 64-byte aligned host memory with live/peak accounting, large blocks cached
// for reuse.
#ifndef STEPJIT_DEVICES_CPU_DEVICE_RUNTIME_H_
#define STEPJIT_DEVICES_CPU_DEVICE_RUNTIME_H_

#include "runtime/device_runtime.h"

namespace stepjit::runtime::cpu {

const DeviceRuntime& Runtime();

// Freed tensor blocks of 256 KiB and more are kept (up to 1 GiB) for the
// next allocation of their size class; the bytes kept now, and a call that
// returns them all to the system.
int64_t CachedHostBytes();
void ReleaseCachedHostMemory();

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_DEVICES_CPU_DEVICE_RUNTIME_H_
