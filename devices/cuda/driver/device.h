// CUDA devices found at run time: the driver (libcuda.so.1) is opened with
// dlopen, so stepjit links no CUDA runtime library and runs where there is
// no driver or GPU; Availability() then says why CUDA is off. The resolved
// entry points are exposed (driver::Api) for the backend built on them
// (devices/cuda/driver/driver_backend.h).
#ifndef STEPJIT_DEVICES_CUDA_DRIVER_DEVICE_H_
#define STEPJIT_DEVICES_CUDA_DRIVER_DEVICE_H_

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

// ---- The driver API itself, for devices/cuda/driver/driver_backend.cc
// ---------- The few driver types are declared here (as in cuda.h: handles are
// pointers, results and devices ints), so no CUDA header is needed.
namespace driver {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUevent = void*;
using CUgraph = void*;
using CUgraphExec = void*;
using CUdeviceptr = unsigned long long;

inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kErrorOutOfMemory = 2;
inline constexpr CUresult kErrorNotFound = 500;
inline constexpr CUresult kErrorNotReady = 600;
inline constexpr int kAttrMaxThreadsPerBlock = 1;
inline constexpr int kAttrMaxGridDimX = 5;
inline constexpr int kAttrComputeCapabilityMajor = 75;
inline constexpr int kAttrComputeCapabilityMinor = 76;
inline constexpr unsigned kStreamNonBlocking = 0x1;
inline constexpr unsigned kEventDefault = 0x0;  // timing on
inline constexpr unsigned kEventDisableTiming = 0x2;
// cuEventRecordWithFlags in a capture: the record becomes a graph node.
inline constexpr unsigned kEventRecordExternal = 0x1;
inline constexpr int kCaptureModeThreadLocal = 1;
inline constexpr int kCaptureModeRelaxed = 2;

// Entry points under their current ABI names (cuda.h maps cuMemAlloc to
// cuMemAlloc_v2 and so on); every one is resolved when a device is found.
struct Api {
  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*DriverGetVersion)(int*) = nullptr;
  CUresult (*GetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*GetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*DeviceGetCount)(int*) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*DeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*CtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*CtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*CtxSynchronize)() = nullptr;
  CUresult (*MemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*MemFree)(CUdeviceptr) = nullptr;
  CUresult (*MemHostAlloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*MemFreeHost)(void*) = nullptr;
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t,
                              CUstream) = nullptr;
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t,
                              CUstream) = nullptr;
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t,
                            CUstream) = nullptr;
  CUresult (*StreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*StreamDestroy)(CUstream) = nullptr;
  CUresult (*StreamSynchronize)(CUstream) = nullptr;
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned) = nullptr;
  CUresult (*EventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*EventRecord)(CUevent, CUstream) = nullptr;
  // CUDA 11.1+; optional (profiling inside CUDA graphs needs it).
  CUresult (*EventRecordWithFlags)(CUevent, CUstream, unsigned) = nullptr;
  CUresult (*EventQuery)(CUevent) = nullptr;
  CUresult (*EventSynchronize)(CUevent) = nullptr;
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*EventDestroy)(CUevent) = nullptr;
  CUresult (*ModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*ModuleUnload)(CUmodule) = nullptr;
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void**,
                           void**) = nullptr;
  CUresult (*StreamBeginCapture)(CUstream, int) = nullptr;
  CUresult (*StreamEndCapture)(CUstream, CUgraph*) = nullptr;
  CUresult (*ThreadExchangeStreamCaptureMode)(int*) = nullptr;
  CUresult (*GraphInstantiate)(CUgraphExec*, CUgraph,
                               unsigned long long) = nullptr;
  CUresult (*GraphLaunch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*GraphExecDestroy)(CUgraphExec) = nullptr;
  CUresult (*GraphDestroy)(CUgraph) = nullptr;
};

}  // namespace driver

// The resolved driver, or Unavailable with Availability().reason.
absl::StatusOr<const driver::Api*> DriverApi();
// Device `ordinal`'s primary context, retained once for the process and
// made current on the calling thread.
absl::StatusOr<driver::CUcontext> UsePrimaryContext(int ordinal);
// OK for CUDA_SUCCESS; otherwise "<call>: CUDA_ERROR_X (text)" with a code
// for the kind of failure: ResourceExhausted for out of memory,
// FailedPrecondition for stream-capture violations, InvalidArgument for bad
// values, handles and images, NotFound, Unavailable when the driver or
// device is gone, Internal for the rest.
absl::Status DriverStatus(driver::CUresult result, absl::string_view call);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_DRIVER_DEVICE_H_
