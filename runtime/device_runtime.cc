// The registry of device runtimes, filled by the devices layer
// (devices/registry.cc) when the program starts.
#include "runtime/device_runtime.h"

#include <atomic>

#include "ir/status.h"

namespace stepjit::runtime {

namespace {

constexpr int kNumDeviceTypes = static_cast<int>(DeviceType::kCUDA) + 1;

// Zero-initialized before any static initializer runs, so registration
// from another file's initializer cannot come too early.
constinit std::atomic<DeviceRuntimeGetter> g_runtimes[kNumDeviceTypes] = {};

const char* TypeName(DeviceType type) {
  return type == DeviceType::kCUDA ? "cuda" : "cpu";
}

}  // namespace

void RegisterDeviceRuntime(DeviceType type, DeviceRuntimeGetter get) {
  const int i = static_cast<int>(type);
  SJ_CHECK(i >= 0 && i < kNumDeviceTypes, "unknown device type ", i);
  g_runtimes[i].store(get, std::memory_order_release);
}

const DeviceRuntime& GetDeviceRuntime(DeviceType type) {
  const int i = static_cast<int>(type);
  SJ_CHECK(i >= 0 && i < kNumDeviceTypes, "unknown device type ", i);
  const DeviceRuntimeGetter get = g_runtimes[i].load(std::memory_order_acquire);
  SJ_REQUIRE(get != nullptr, "no ", TypeName(type),
             " device runtime is linked into this program: the devices "
             "layer registers them (devices/registry.cc), and a program "
             "linked with libstepjit.a by hand needs "
             "-Wl,--undefined=stepjit_link_devices to keep it (the CMake "
             "target stepjit::stepjit and `pkg-config --libs stepjit` add "
             "it)");
  return get();
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
