// What the device-neutral eager runtime (dispatch, storage, tensor
// transfers) needs from a device type, found by type in one registry:
// its op kernels, its layout copy, transfers between it and the host, and
// its memory. Dispatch and Storage never branch on a device type; a new
// device type is a folder of the devices layer implementing one
// DeviceRuntime and one line in devices/registry.cc, which registers every
// device type's runtime when the program starts.
#ifndef STEPJIT_RUNTIME_DEVICE_RUNTIME_H_
#define STEPJIT_RUNTIME_DEVICE_RUNTIME_H_

#include <array>
#include <cstdint>

#include "ir/op.h"
#include "runtime/device.h"
#include "runtime/dispatch.h"
#include "runtime/profiler.h"

namespace stepjit::runtime {

// A device kernel: runs `k.op` with `k.inputs` already on the device and in
// the op's compute dtype, into `k.out` (allocated on the device; inputs[0]
// for in-place ops).
using Kernel = void (*)(const KernelArgs& k);

struct DeviceRuntime {
  // For messages: "cpu", "cuda".
  const char* name = "";
  // The kernel of each op on this device; null where the device has none
  // (views have none anywhere: they alias their input).
  std::array<Kernel, ir::kNumOps> kernels{};
  // dst (any strides) = src converted to dst's dtype and broadcast to dst's
  // shape; both on this device.
  void (*copy_into)(const Tensor& dst, const Tensor& src) = nullptr;
  // `t` copied between the host and this device (`to` is this device or
  // the CPU, `t` is on the other). Null for the CPU.
  Tensor (*transfer)(const Tensor& t, Device to, bool non_blocking) = nullptr;
  // `nbytes` of uninitialized memory on `device` (throws Error when the
  // device or the memory is not there), and its release.
  void* (*allocate)(int64_t nbytes, Device device) = nullptr;
  void (*release)(void* data, int64_t nbytes, Device device) = nullptr;
  // Page-locked host memory for asynchronous copies to and from this
  // device; null where the device offers none.
  void* (*allocate_pinned)(int64_t nbytes) = nullptr;
  void (*release_pinned)(void* data) = nullptr;
  // Times the device's asynchronous work for the profiler on the device's
  // clock; null where host spans time the work (the CPU).
  DeviceTimer* timer = nullptr;
};

// The runtime of `type` (every DeviceType has one).
// The runtime registered for `type`. Throws Error when none is: a program
// linked without the devices layer's registry (libstepjit.a needs
// -Wl,--undefined=stepjit_link_devices; the CMake target and pkg-config
// add it).
const DeviceRuntime& GetDeviceRuntime(DeviceType type);

// Registers the runtime of a device type (the devices layer does, for every
// type, during static initialization); a second registration replaces the
// first.
using DeviceRuntimeGetter = const DeviceRuntime& (*)();
void RegisterDeviceRuntime(DeviceType type, DeviceRuntimeGetter get);

// The kernel of `op` on `device`; throws Error naming the op and the device
// when there is none.
Kernel GetKernel(ir::OpId op, Device device);

// `t` on `device`: itself when it is there already, else a copy made by the
// runtime of the device that is not the CPU. Copies between two non-CPU
// devices go through the host.
Tensor TransferTensor(const Tensor& t, Device device,
                      bool non_blocking = false);

// The runtime that provides pinned host memory (the first that does), or
// null when no device does.
const DeviceRuntime* PinnedMemoryRuntime();

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_DEVICE_RUNTIME_H_
