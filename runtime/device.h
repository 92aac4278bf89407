// Device: where a tensor's storage lives, the CPU or a CUDA device; what each
// device type provides is its DeviceRuntime (runtime/device_runtime.h).
#ifndef STEPJIT_RUNTIME_DEVICE_H_
#define STEPJIT_RUNTIME_DEVICE_H_

#include <string>

namespace stepjit {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::kCUDA, i}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const {
    return is_cpu() ? "cpu" : "cuda:" + std::to_string(index);
  }
};

}  // namespace stepjit

#endif  // STEPJIT_RUNTIME_DEVICE_H_
