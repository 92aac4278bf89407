// Registers every device type's runtime with the tensor core's registry
// (runtime/device_runtime.h) when the program starts: the one place that
// names every device type.
//
// A static library keeps an object only when something refers to it, and
// nothing below this layer may: programs keep this one by asking for its
// anchor, stepjit_link_devices (the CMake target and pkg-config pass
// -Wl,--undefined=stepjit_link_devices).
#include "devices/cpu/device_runtime.h"
#include "devices/cuda/device_runtime.h"
#include "runtime/device_runtime.h"

extern "C" void stepjit_link_devices() {}

namespace stepjit::runtime {
namespace {

const bool registered = [] {
  RegisterDeviceRuntime(DeviceType::kCPU, &cpu::Runtime);
  RegisterDeviceRuntime(DeviceType::kCUDA, &cuda::Runtime);
  return true;
}();

}  // namespace
}  // namespace stepjit::runtime
