// The CUDA driver API through dlopen: detection, contexts, memory, modules
// and launches. The few driver types and entry points are declared here, so
// the build needs no driver and the binary links none.
#include "runtime/cuda/device.h"

#include <dlfcn.h>

#include <mutex>

#include "absl/strings/str_cat.h"

namespace stepjit::runtime::cuda {

namespace {

// The driver ABI (cuda.h): handles are pointers, CUresult and CUdevice ints.
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUdeviceptr = unsigned long long;
constexpr CUresult kSuccess = 0;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;

struct Driver {
  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*DriverGetVersion)(int*) = nullptr;
  CUresult (*GetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*GetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*DeviceGetCount)(int*) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*DeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*CtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*CtxSynchronize)() = nullptr;
  CUresult (*MemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*MemFree)(CUdeviceptr) = nullptr;
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*ModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*ModuleUnload)(CUmodule) = nullptr;
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void**,
                           void**) = nullptr;
};

struct State {
  CudaAvailability info;
  Driver driver;
  std::mutex mu;                    // guards contexts
  std::vector<CUcontext> contexts;  // retained primary contexts, by ordinal
};

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

std::string ErrorText(const Driver& d, CUresult r) {
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
  Driver& d = s->driver;
  const std::pair<const char*, bool> symbols[] = {
      {"cuInit", Resolve(lib, "cuInit", d.Init)},
      {"cuDriverGetVersion",
       Resolve(lib, "cuDriverGetVersion", d.DriverGetVersion)},
      {"cuGetErrorName", Resolve(lib, "cuGetErrorName", d.GetErrorName)},
      {"cuGetErrorString", Resolve(lib, "cuGetErrorString", d.GetErrorString)},
      {"cuDeviceGetCount", Resolve(lib, "cuDeviceGetCount", d.DeviceGetCount)},
      {"cuDeviceGet", Resolve(lib, "cuDeviceGet", d.DeviceGet)},
      {"cuDeviceGetName", Resolve(lib, "cuDeviceGetName", d.DeviceGetName)},
      {"cuDeviceGetAttribute",
       Resolve(lib, "cuDeviceGetAttribute", d.DeviceGetAttribute)},
      {"cuDevicePrimaryCtxRetain",
       Resolve(lib, "cuDevicePrimaryCtxRetain", d.DevicePrimaryCtxRetain)},
      {"cuCtxSetCurrent", Resolve(lib, "cuCtxSetCurrent", d.CtxSetCurrent)},
      {"cuCtxSynchronize", Resolve(lib, "cuCtxSynchronize", d.CtxSynchronize)},
      {"cuMemAlloc_v2", Resolve(lib, "cuMemAlloc_v2", d.MemAlloc)},
      {"cuMemFree_v2", Resolve(lib, "cuMemFree_v2", d.MemFree)},
      {"cuMemcpyHtoD_v2", Resolve(lib, "cuMemcpyHtoD_v2", d.MemcpyHtoD)},
      {"cuMemcpyDtoH_v2", Resolve(lib, "cuMemcpyDtoH_v2", d.MemcpyDtoH)},
      {"cuModuleLoadData", Resolve(lib, "cuModuleLoadData", d.ModuleLoadData)},
      {"cuModuleUnload", Resolve(lib, "cuModuleUnload", d.ModuleUnload)},
      {"cuModuleGetFunction",
       Resolve(lib, "cuModuleGetFunction", d.ModuleGetFunction)},
      {"cuLaunchKernel", Resolve(lib, "cuLaunchKernel", d.LaunchKernel)},
  };
  for (const auto& [name, found] : symbols) {
    if (!found) {
      info.reason = absl::StrCat("the CUDA driver (libcuda.so.1) has no ", name,
                                 "; it is too old");
      return s;
    }
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
    d.DeviceGetAttribute(&di.major, kAttrComputeCapabilityMajor, dev);
    d.DeviceGetAttribute(&di.minor, kAttrComputeCapabilityMinor, dev);
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

// The driver, or Unavailable with the reason there is none.
absl::StatusOr<const Driver*> Ready() {
  State& s = GetState();
  if (!s.info.available) return absl::UnavailableError(s.info.reason);
  return &s.driver;
}

absl::Status Check(const Driver& d, CUresult r, absl::string_view what) {
  if (r == kSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed: ", ErrorText(d, r)));
}

thread_local int current_device = -1;

// Makes the current device's primary context current on this thread.
absl::StatusOr<const Driver*> Current() {
  if (current_device < 0) {
    if (absl::Status st = SetDevice(0); !st.ok()) return st;
  }
  return Ready();
}

}  // namespace

std::string DeviceInfo::arch() const {
  return absl::StrCat("sm_", major, minor);
}

const CudaAvailability& Availability() { return GetState().info; }

absl::Status RequireDevice() { return Ready().status(); }

absl::Status SetDevice(int ordinal) {
  absl::StatusOr<const Driver*> d = Ready();
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
          Check(**d, (*d)->DeviceGet(&dev, ordinal), "cuDeviceGet");
      if (st.ok())
        st = Check(**d, (*d)->DevicePrimaryCtxRetain(&s.contexts[ordinal], dev),
                   "cuDevicePrimaryCtxRetain");
      if (!st.ok()) return st;
    }
    ctx = s.contexts[ordinal];
  }
  absl::Status st = Check(**d, (*d)->CtxSetCurrent(ctx), "cuCtxSetCurrent");
  if (st.ok()) current_device = ordinal;
  return st;
}

absl::Status Synchronize() {
  absl::StatusOr<const Driver*> d = Current();
  if (!d.ok()) return d.status();
  return Check(**d, (*d)->CtxSynchronize(), "cuCtxSynchronize");
}

absl::StatusOr<DevicePtr> Malloc(size_t bytes) {
  absl::StatusOr<const Driver*> d = Current();
  if (!d.ok()) return d.status();
  CUdeviceptr p = 0;
  if (absl::Status st = Check(**d, (*d)->MemAlloc(&p, bytes),
                              absl::StrCat("cuMemAlloc(", bytes, ")"));
      !st.ok()) {
    return st;
  }
  return p;
}

absl::Status Free(DevicePtr ptr) {
  absl::StatusOr<const Driver*> d = Current();
  if (!d.ok()) return d.status();
  return Check(**d, (*d)->MemFree(ptr), "cuMemFree");
}

absl::Status CopyToDevice(DevicePtr dst, const void* src, size_t bytes) {
  absl::StatusOr<const Driver*> d = Current();
  if (!d.ok()) return d.status();
  return Check(**d, (*d)->MemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

absl::Status CopyToHost(void* dst, DevicePtr src, size_t bytes) {
  absl::StatusOr<const Driver*> d = Current();
  if (!d.ok()) return d.status();
  return Check(**d, (*d)->MemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

absl::StatusOr<Module> Module::Load(const std::string& cubin) {
  absl::StatusOr<const Driver*> d = Current();
  if (!d.ok()) return d.status();
  CUmodule m = nullptr;
  if (absl::Status st = Check(**d, (*d)->ModuleLoadData(&m, cubin.data()),
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
  absl::StatusOr<const Driver*> d = Current();
  if (!d.ok()) return d.status();
  CUfunction f = nullptr;
  const std::string n(name);
  if (absl::Status st =
          Check(**d, (*d)->ModuleGetFunction(&f, handle_, n.c_str()),
                absl::StrCat("cuModuleGetFunction(", n, ")"));
      !st.ok()) {
    return st;
  }
  return Function{f};
}

absl::Status Launch(Function f, int64_t grid, int block, void** args) {
  absl::StatusOr<const Driver*> d = Current();
  if (!d.ok()) return d.status();
  if (grid <= 0 || grid > 0x7fffffff || block <= 0 || block > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad launch shape ", grid, " x ", block));
  }
  return Check(**d,
               (*d)->LaunchKernel(f.handle, static_cast<unsigned>(grid), 1, 1,
                                  static_cast<unsigned>(block), 1, 1, 0,
                                  nullptr, args, nullptr),
               "cuLaunchKernel");
}

}  // namespace stepjit::runtime::cuda
