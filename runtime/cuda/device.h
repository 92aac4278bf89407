// CUDA devices found at run time: the driver (libcuda.so.1) is opened with
// dlopen, so stepjit links no CUDA runtime library and runs where there is
// no driver or GPU; Availability() then says why CUDA is off.
#ifndef STEPJIT_RUNTIME_CUDA_DEVICE_H_
#define STEPJIT_RUNTIME_CUDA_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stepjit::runtime::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  std::string arch() const;  // "sm_90"
};

struct CudaAvailability {
  bool available = false;
  std::string reason;      // why not, for people: "no CUDA driver: cannot load
                           // libcuda.so.1 (...)"
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000; 0 without a driver
  std::vector<DeviceInfo> devices;
};

// Probed once per process (dlopen, cuInit, cuDeviceGetCount); thread-safe.
const CudaAvailability& Availability();
// OK, or Unavailable carrying Availability().reason.
absl::Status RequireDevice();

// The calls below use the primary context of the current device (device 0
// unless SetDevice chose another) and the default stream. Every one returns
// Unavailable without a device and the driver's error name otherwise.
absl::Status SetDevice(int ordinal);
absl::Status Synchronize();

using DevicePtr = uint64_t;
absl::StatusOr<DevicePtr> Malloc(size_t bytes);
absl::Status Free(DevicePtr ptr);
absl::Status CopyToDevice(DevicePtr dst, const void* src, size_t bytes);
absl::Status CopyToHost(void* dst, DevicePtr src, size_t bytes);

// A kernel handle inside a loaded module.
struct Function {
  void* handle = nullptr;
};

// A loaded cubin; unloaded on destruction.
class Module {
 public:
  static absl::StatusOr<Module> Load(const std::string& cubin);
  Module(Module&& other) noexcept : handle_(other.handle_) {
    other.handle_ = nullptr;
  }
  Module& operator=(Module&& other) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module();

  absl::StatusOr<Function> GetFunction(absl::string_view name) const;

 private:
  explicit Module(void* handle) : handle_(handle) {}
  void* handle_ = nullptr;
};

// Launches `f` with `grid` x `block` threads; `args` points at each argument
// value in order, as cuLaunchKernel takes them.
absl::Status Launch(Function f, int64_t grid, int block, void** args);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_RUNTIME_CUDA_DEVICE_H_
