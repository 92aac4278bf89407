// The registry of device runtimes: the one place that names every device
// type.
#include "runtime/device_runtime.h"

#include "ir/status.h"
#include "runtime/cpu/device_runtime.h"
#include "runtime/cuda/device_runtime.h"

namespace stepjit::runtime {

const DeviceRuntime& GetDeviceRuntime(DeviceType type) {
  switch (type) {
    case DeviceType::kCPU:
      return cpu::Runtime();
    case DeviceType::kCUDA:
      return cuda::Runtime();
  }
  SJ_CHECK(false, "unknown device type ", static_cast<int>(type));
  return cpu::Runtime();
}

Kernel GetKernel(ir::OpId op, Device device) {
  const DeviceRuntime& rt = GetDeviceRuntime(device.type);
  const Kernel k = rt.kernels[static_cast<int>(op)];
  SJ_REQUIRE(k != nullptr, ir::OpName(op), ": no kernel on ", device.str());
  return k;
}

Tensor TransferTensor(const Tensor& t, Device device, bool non_blocking) {
  if (t.device() == device) return t;
  if (!t.device().is_cpu() && !device.is_cpu() &&
      t.device().type != device.type) {
    return TransferTensor(TransferTensor(t, Device::cpu()), device,
                          non_blocking);
  }
  const DeviceRuntime& rt =
      GetDeviceRuntime(device.is_cpu() ? t.device().type : device.type);
  SJ_CHECK(rt.transfer != nullptr, rt.name, " has no transfer");
  return rt.transfer(t, device, non_blocking);
}

const DeviceRuntime* PinnedMemoryRuntime() {
  for (DeviceType type : {DeviceType::kCPU, DeviceType::kCUDA}) {
    const DeviceRuntime& rt = GetDeviceRuntime(type);
    if (rt.allocate_pinned != nullptr) return &rt;
  }
  return nullptr;
}

}  // namespace stepjit::runtime
