// The CUDA driver API through dlopen: detection, contexts, memory, modules
// and launches. The few driver types and entry points are declared in
// device.h, so the build needs no driver and the binary links none.
#include "devices/cuda/driver/device.h"

#include <dlfcn.h>

#include <mutex>

#include "absl/strings/str_cat.h"

namespace stepjit::runtime::cuda {

namespace {

using driver::CUcontext;
using driver::CUdevice;
using driver::CUdeviceptr;
using driver::CUfunction;
using driver::CUmodule;
using driver::CUresult;
using driver::kSuccess;

struct State {
  CudaAvailability info;
  driver::Api driver;
  std::mutex mu;                    // guards contexts
  std::vector<CUcontext> contexts;  // retained primary contexts, by ordinal
};

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

std::string ErrorText(const driver::Api& d, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.GetErrorName == nullptr || d.GetErrorName(r, &name) != kSuccess ||
      name == nullptr) {
    return absl::StrCat("CUDA error ", r);
  }
  if (d.GetErrorString != nullptr && d.GetErrorString(r, &text) == kSuccess &&
      text != nullptr) {
    return absl::StrCat(name, " (", text, ")");
  }
  return name;
}

absl::StatusCode CodeFor(CUresult r) {
  switch (r) {
    case driver::kErrorOutOfMemory:
      return absl::StatusCode::kResourceExhausted;
    case 1:    // CUDA_ERROR_INVALID_VALUE
    case 200:  // CUDA_ERROR_INVALID_IMAGE
    case 209:  // CUDA_ERROR_NO_BINARY_FOR_GPU
    case 218:  // CUDA_ERROR_INVALID_PTX
    case 222:  // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
    case 400:  // CUDA_ERROR_INVALID_HANDLE
      return absl::StatusCode::kInvalidArgument;
    case driver::kErrorNotFound:
      return absl::StatusCode::kNotFound;
    case 3:    // CUDA_ERROR_NOT_INITIALIZED
    case 4:    // CUDA_ERROR_DEINITIALIZED
    case 34:   // CUDA_ERROR_STUB_LIBRARY
    case 35:   // CUDA_ERROR_INSUFFICIENT_DRIVER
    case 46:   // CUDA_ERROR_DEVICE_UNAVAILABLE
    case 100:  // CUDA_ERROR_NO_DEVICE
    case 101:  // CUDA_ERROR_INVALID_DEVICE
      return absl::StatusCode::kUnavailable;
    default:
      // CUDA_ERROR_STREAM_CAPTURE_* and CUDA_ERROR_CAPTURED_EVENT: a call
      // that a stream capture in progress forbids.
      if (r >= 900 && r <= 908) return absl::StatusCode::kFailedPrecondition;
      return absl::StatusCode::kInternal;
  }
}

State* Probe() {
  auto* s = new State;
  CudaAvailability& info = s->info;
  dlerror();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    info.reason = absl::StrCat("no CUDA driver: cannot load libcuda.so.1 (",
                               err ? err : "not found", ")");
    return s;
  }
  driver::Api& d = s->driver;
  // cuEventElapsedTime_v2 (CUDA 12.8) is the current ABI name; older
  // drivers have only the first version, with the same signature.
  if (!Resolve(lib, "cuEventElapsedTime_v2", d.EventElapsedTime))
    Resolve(lib, "cuEventElapsedTime", d.EventElapsedTime);
  // The first symbol this driver lacks (nullptr when it has them all).
  const char* missing = nullptr;
  auto need = [&](const char* name, auto& fn) {
    if (!Resolve(lib, name, fn) && missing == nullptr) missing = name;
  };
  need("cuInit", d.Init);
  need("cuDriverGetVersion", d.DriverGetVersion);
  need("cuGetErrorName", d.GetErrorName);
  need("cuGetErrorString", d.GetErrorString);
  need("cuDeviceGetCount", d.DeviceGetCount);
  need("cuDeviceGet", d.DeviceGet);
  need("cuDeviceGetName", d.DeviceGetName);
  need("cuDeviceGetAttribute", d.DeviceGetAttribute);
  need("cuDevicePrimaryCtxRetain", d.DevicePrimaryCtxRetain);
  need("cuCtxGetCurrent", d.CtxGetCurrent);
  need("cuCtxSetCurrent", d.CtxSetCurrent);
  need("cuCtxSynchronize", d.CtxSynchronize);
  need("cuMemAlloc_v2", d.MemAlloc);
  need("cuMemFree_v2", d.MemFree);
  need("cuMemHostAlloc", d.MemHostAlloc);
  need("cuMemFreeHost", d.MemFreeHost);
  need("cuMemcpyHtoD_v2", d.MemcpyHtoD);
  need("cuMemcpyDtoH_v2", d.MemcpyDtoH);
  need("cuMemcpyHtoDAsync_v2", d.MemcpyHtoDAsync);
  need("cuMemcpyDtoHAsync_v2", d.MemcpyDtoHAsync);
  need("cuMemcpyDtoDAsync_v2", d.MemcpyDtoDAsync);
  need("cuMemsetD8Async", d.MemsetD8Async);
  need("cuStreamCreate", d.StreamCreate);
  need("cuStreamDestroy_v2", d.StreamDestroy);
  need("cuStreamSynchronize", d.StreamSynchronize);
  need("cuStreamWaitEvent", d.StreamWaitEvent);
  need("cuEventCreate", d.EventCreate);
  need("cuEventRecord", d.EventRecord);
  Resolve(lib, "cuEventRecordWithFlags", d.EventRecordWithFlags);
  need("cuEventQuery", d.EventQuery);
  need("cuEventSynchronize", d.EventSynchronize);
  if (d.EventElapsedTime == nullptr && missing == nullptr) missing = "cuEventElapsedTime";
  need("cuEventDestroy_v2", d.EventDestroy);
  need("cuModuleLoadData", d.ModuleLoadData);
  need("cuModuleUnload", d.ModuleUnload);
  need("cuModuleGetFunction", d.ModuleGetFunction);
  need("cuLaunchKernel", d.LaunchKernel);
  need("cuStreamBeginCapture_v2", d.StreamBeginCapture);
  need("cuStreamEndCapture", d.StreamEndCapture);
  need("cuThreadExchangeStreamCaptureMode", d.ThreadExchangeStreamCaptureMode);
  need("cuGraphInstantiateWithFlags", d.GraphInstantiate);
  need("cuGraphLaunch", d.GraphLaunch);
  need("cuGraphExecDestroy", d.GraphExecDestroy);
  need("cuGraphDestroy", d.GraphDestroy);
  if (missing != nullptr) {
    info.reason = absl::StrCat("the CUDA driver (libcuda.so.1) has no ", missing,
                               "; it is too old");
    return s;
  }
  if (CUresult r = d.Init(0); r != kSuccess) {
    info.reason = absl::StrCat("no usable CUDA device: cuInit failed with ",
                               ErrorText(d, r));
    return s;
  }
  d.DriverGetVersion(&info.driver_version);
  int count = 0;
  if (CUresult r = d.DeviceGetCount(&count); r != kSuccess) {
    info.reason =
        absl::StrCat("no usable CUDA device: cuDeviceGetCount failed with ",
                     ErrorText(d, r));
    return s;
  }
  if (count <= 0) {
    info.reason =
        "no CUDA devices: the driver reports none (check CUDA_VISIBLE_DEVICES)";
    return s;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    char name[256] = {};
    DeviceInfo di;
    di.ordinal = i;
    if (d.DeviceGet(&dev, i) != kSuccess) continue;
    if (d.DeviceGetName(name, sizeof(name) - 1, dev) == kSuccess)
      di.name = name;
    d.DeviceGetAttribute(&di.major, driver::kAttrComputeCapabilityMajor, dev);
    d.DeviceGetAttribute(&di.minor, driver::kAttrComputeCapabilityMinor, dev);
    info.devices.push_back(std::move(di));
  }
  s->contexts.assign(info.devices.size(), nullptr);
  info.available = !info.devices.empty();
  if (!info.available)
    info.reason = "no CUDA devices: cuDeviceGet failed for every ordinal";
  return s;
}

State& GetState() {
  static State* state = Probe();
  return *state;
}

// The device SetDevice chose on this thread, for the calls below.
thread_local int current_device = 0;

// Makes the current device's primary context current on this thread.
absl::StatusOr<const driver::Api*> Current() {
  absl::StatusOr<driver::CUcontext> ctx = UsePrimaryContext(current_device);
  if (!ctx.ok()) return ctx.status();
  return &GetState().driver;
}

}  // namespace

std::string DeviceInfo::arch() const {
  return absl::StrCat("sm_", major, minor);
}

const CudaAvailability& Availability() { return GetState().info; }

absl::Status RequireDevice() { return DriverApi().status(); }

absl::StatusOr<const driver::Api*> DriverApi() {
  State& s = GetState();
  if (!s.info.available) return absl::UnavailableError(s.info.reason);
  return &s.driver;
}

absl::Status DriverStatus(CUresult result, absl::string_view call) {
  if (result == kSuccess) return absl::OkStatus();
  return absl::Status(
      CodeFor(result),
      absl::StrCat(call, ": ", ErrorText(GetState().driver, result)));
}

absl::StatusOr<CUcontext> UsePrimaryContext(int ordinal) {
  absl::StatusOr<const driver::Api*> d = DriverApi();
  if (!d.ok()) return d.status();
  State& s = GetState();
  if (ordinal < 0 || ordinal >= static_cast<int>(s.info.devices.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", ordinal, " does not exist (",
                     s.info.devices.size(), " found)"));
  }
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.contexts[ordinal] == nullptr) {
      CUdevice dev = 0;
      absl::Status st =
          DriverStatus((*d)->DeviceGet(&dev, ordinal),
                       absl::StrCat("cuDeviceGet(", ordinal, ")"));
      if (st.ok())
        st = DriverStatus(
            (*d)->DevicePrimaryCtxRetain(&s.contexts[ordinal], dev),
            "cuDevicePrimaryCtxRetain");
      if (!st.ok()) return st;
    }
    ctx = s.contexts[ordinal];
  }
  // Cheap when already current; other code (cuBLASLt, another backend) may
  // have changed this thread's context since.
  CUcontext now = nullptr;
  if ((*d)->CtxGetCurrent(&now) == kSuccess && now == ctx) return ctx;
  if (absl::Status st =
          DriverStatus((*d)->CtxSetCurrent(ctx), "cuCtxSetCurrent");
      !st.ok()) {
    return st;
  }
  return ctx;
}

absl::Status SetDevice(int ordinal) {
  absl::StatusOr<CUcontext> ctx = UsePrimaryContext(ordinal);
  if (!ctx.ok()) return ctx.status();
  current_device = ordinal;
  return absl::OkStatus();
}

absl::Status Synchronize() {
  absl::StatusOr<const driver::Api*> d = Current();
  if (!d.ok()) return d.status();
  return DriverStatus((*d)->CtxSynchronize(), "cuCtxSynchronize");
}

absl::StatusOr<DevicePtr> Malloc(size_t bytes) {
  absl::StatusOr<const driver::Api*> d = Current();
  if (!d.ok()) return d.status();
  CUdeviceptr p = 0;
  if (absl::Status st =
          DriverStatus((*d)->MemAlloc(&p, bytes),
                       absl::StrCat("cuMemAlloc(", bytes, " bytes)"));
      !st.ok()) {
    return st;
  }
  return p;
}

absl::Status Free(DevicePtr ptr) {
  absl::StatusOr<const driver::Api*> d = Current();
  if (!d.ok()) return d.status();
  return DriverStatus((*d)->MemFree(ptr), "cuMemFree");
}

absl::Status CopyToDevice(DevicePtr dst, const void* src, size_t bytes) {
  absl::StatusOr<const driver::Api*> d = Current();
  if (!d.ok()) return d.status();
  return DriverStatus((*d)->MemcpyHtoD(dst, src, bytes),
                      absl::StrCat("cuMemcpyHtoD(", bytes, " bytes)"));
}

absl::Status CopyToHost(void* dst, DevicePtr src, size_t bytes) {
  absl::StatusOr<const driver::Api*> d = Current();
  if (!d.ok()) return d.status();
  return DriverStatus((*d)->MemcpyDtoH(dst, src, bytes),
                      absl::StrCat("cuMemcpyDtoH(", bytes, " bytes)"));
}

absl::StatusOr<Module> Module::Load(const std::string& cubin) {
  absl::StatusOr<const driver::Api*> d = Current();
  if (!d.ok()) return d.status();
  CUmodule m = nullptr;
  if (absl::Status st = DriverStatus((*d)->ModuleLoadData(&m, cubin.data()),
                                     "cuModuleLoadData");
      !st.ok()) {
    return st;
  }
  return Module(m);
}

Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    this->~Module();
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

Module::~Module() {
  if (handle_ != nullptr) GetState().driver.ModuleUnload(handle_);
}

absl::StatusOr<Function> Module::GetFunction(absl::string_view name) const {
  absl::StatusOr<const driver::Api*> d = Current();
  if (!d.ok()) return d.status();
  CUfunction f = nullptr;
  const std::string n(name);
  if (absl::Status st =
          DriverStatus((*d)->ModuleGetFunction(&f, handle_, n.c_str()),
                       absl::StrCat("cuModuleGetFunction(", n, ")"));
      !st.ok()) {
    return st;
  }
  return Function{f};
}

absl::Status Launch(Function f, int64_t grid, int block, void** args) {
  absl::StatusOr<const driver::Api*> d = Current();
  if (!d.ok()) return d.status();
  if (grid <= 0 || grid > 0x7fffffff || block <= 0 || block > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad launch shape ", grid, " x ", block));
  }
  return DriverStatus((*d)->LaunchKernel(f.handle, static_cast<unsigned>(grid),
                                         1, 1, static_cast<unsigned>(block), 1,
                                         1, 0, nullptr, args, nullptr),
                      "cuLaunchKernel");
}

}  // namespace stepjit::runtime::cuda
