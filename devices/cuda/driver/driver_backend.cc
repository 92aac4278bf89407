// Backend over the CUDA driver API: memory, streams, events, NVRTC modules,
// launches, graphs, and cuBLASLt GEMMs on one device's primary context.
#include "devices/cuda/driver/driver_backend.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "codegen/cuda/nvrtc.h"
#include "devices/cuda/cublaslt/cublaslt.h"
#include "devices/cuda/driver/device.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {

namespace {

using driver::CUcontext;
using driver::CUdeviceptr;
using driver::CUevent;
using driver::CUfunction;
using driver::CUgraph;
using driver::CUgraphExec;
using driver::CUmodule;
using driver::CUresult;
using driver::CUstream;
using driver::kSuccess;

constexpr unsigned kMemHostAllocPortable = 0x1;

CUdeviceptr DevPtr(const void* p) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}
CUstream AsStream(Stream s) { return reinterpret_cast<CUstream>(s); }
CUevent AsEvent(Event e) { return reinterpret_cast<CUevent>(e); }

// Makes `ctx` current on this thread; the driver's calls act on the
// current context, and any thread may call the backend.
absl::Status Bind(const driver::Api& d, CUcontext ctx) {
  CUcontext now = nullptr;
  if (d.CtxGetCurrent(&now) == kSuccess && now == ctx) return absl::OkStatus();
  return DriverStatus(d.CtxSetCurrent(ctx), "cuCtxSetCurrent");
}

// Lets this thread make calls a stream capture in progress would refuse
// (allocations, module loads): they are not stream work, and the memory or
// module outlives the graph that uses it.
class RelaxedCapture {
 public:
  explicit RelaxedCapture(const driver::Api& d) : d_(d) {
    ok_ = d_.ThreadExchangeStreamCaptureMode(&mode_) == kSuccess;
  }
  ~RelaxedCapture() {
    if (ok_) d_.ThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  const driver::Api& d_;
  int mode_ = driver::kCaptureModeRelaxed;
  bool ok_ = false;
};

class DriverModule final : public LoadedModule {
 public:
  DriverModule(const driver::Api* d, CUcontext ctx, CUmodule module,
               std::string name,
               absl::flat_hash_map<std::string, CUfunction> kernels)
      : d_(d),
        ctx_(ctx),
        module_(module),
        name_(std::move(name)),
        kernels_(std::move(kernels)) {}
  DriverModule(const DriverModule&) = delete;
  DriverModule& operator=(const DriverModule&) = delete;
  ~DriverModule() override {
    if (Bind(*d_, ctx_).ok()) d_->ModuleUnload(module_);
  }

  absl::StatusOr<KernelHandle> Function(absl::string_view name) const override {
    auto it = kernels_.find(name);
    if (it != kernels_.end()) return KernelHandle{it->second};
    RETURN_IF_ERROR(Bind(*d_, ctx_));
    CUfunction f = nullptr;
    const std::string n(name);
    const CUresult r = d_->ModuleGetFunction(&f, module_, n.c_str());
    if (r == driver::kErrorNotFound) {
      return absl::NotFoundError(
          absl::StrCat("CUDA module '", name_, "' has no kernel '", n, "'"));
    }
    RETURN_IF_ERROR(
        DriverStatus(r, absl::StrCat("cuModuleGetFunction(", n, ")")));
    return KernelHandle{f};
  }

 private:
  const driver::Api* d_;
  CUcontext ctx_;
  CUmodule module_;
  std::string name_;
  absl::flat_hash_map<std::string, CUfunction> kernels_;
};

class CudaDriverBackend final : public Backend {
 public:
  CudaDriverBackend(const driver::Api* d, CUcontext ctx, DeviceInfo info,
                    int driver_version, std::string arch, BackendLimits limits)
      : d_(*d),
        ctx_(ctx),
        info_(std::move(info)),
        driver_version_(driver_version),
        arch_(std::move(arch)),
        limits_(limits) {}

  ~CudaDriverBackend() override {
    // Queued GEMMs may still use the workspaces cuBLASLt frees.
    if (Bind(d_, ctx_).ok()) d_.CtxSynchronize();
    lt_.reset();
  }

  int DeviceOrdinal() const override { return info_.ordinal; }
  absl::Status BindThread() override { return Bind(d_, ctx_); }
  std::string Describe() const override {
    return absl::StrCat(info_.name.empty() ? "CUDA device" : info_.name, " (",
                        info_.arch(), "), driver ", driver_version_ / 1000, ".",
                        driver_version_ % 1000 / 10);
  }
  std::string Arch() const override { return arch_; }
  int DeviceCount() const override {
    return static_cast<int>(Availability().devices.size());
  }
  BackendLimits Limits() const override { return limits_; }

  absl::StatusOr<void*> DeviceAlloc(size_t bytes) override {
    if (bytes == 0) return nullptr;
    RETURN_IF_ERROR(Bind(d_, ctx_));
    RelaxedCapture relaxed(d_);
    CUdeviceptr p = 0;
    RETURN_IF_ERROR(DriverStatus(
        d_.MemAlloc(&p, bytes), absl::StrCat("cuMemAlloc(", bytes, " bytes)")));
    return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  }
  absl::Status DeviceFree(void* ptr) override {
    if (ptr == nullptr) return absl::OkStatus();
    RETURN_IF_ERROR(Bind(d_, ctx_));
    return DriverStatus(d_.MemFree(DevPtr(ptr)), "cuMemFree");
  }
  absl::StatusOr<void*> HostAllocPinned(size_t bytes) override {
    if (bytes == 0) return nullptr;
    RETURN_IF_ERROR(Bind(d_, ctx_));
    RelaxedCapture relaxed(d_);
    void* p = nullptr;
    RETURN_IF_ERROR(
        DriverStatus(d_.MemHostAlloc(&p, bytes, kMemHostAllocPortable),
                     absl::StrCat("cuMemHostAlloc(", bytes, " bytes)")));
    return p;
  }
  absl::Status HostFreePinned(void* ptr) override {
    if (ptr == nullptr) return absl::OkStatus();
    RETURN_IF_ERROR(Bind(d_, ctx_));
    return DriverStatus(d_.MemFreeHost(ptr), "cuMemFreeHost");
  }

  absl::Status Copy(void* dst, const void* src, size_t bytes, CopyKind kind,
                    Stream stream) override {
    if (bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(Bind(d_, ctx_));
    // The driver's own rules for pageable host memory are backend.h's: an
    // async copy from it returns once the source is staged, one to it once
    // the copy is done.
    switch (kind) {
      case CopyKind::kHostToDevice:
        return DriverStatus(
            d_.MemcpyHtoDAsync(DevPtr(dst), src, bytes, AsStream(stream)),
            absl::StrCat("cuMemcpyHtoDAsync(", bytes, " bytes)"));
      case CopyKind::kDeviceToHost:
        return DriverStatus(
            d_.MemcpyDtoHAsync(dst, DevPtr(src), bytes, AsStream(stream)),
            absl::StrCat("cuMemcpyDtoHAsync(", bytes, " bytes)"));
      case CopyKind::kDeviceToDevice:
        return DriverStatus(
            d_.MemcpyDtoDAsync(DevPtr(dst), DevPtr(src), bytes,
                               AsStream(stream)),
            absl::StrCat("cuMemcpyDtoDAsync(", bytes, " bytes)"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("Copy: unknown copy kind ", static_cast<int>(kind)));
  }
  absl::Status Memset(void* dst, uint8_t value, size_t bytes,
                      Stream stream) override {
    if (bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(Bind(d_, ctx_));
    return DriverStatus(
        d_.MemsetD8Async(DevPtr(dst), value, bytes, AsStream(stream)),
        absl::StrCat("cuMemsetD8Async(", bytes, " bytes)"));
  }

  absl::StatusOr<Stream> CreateStream() override {
    RETURN_IF_ERROR(Bind(d_, ctx_));
    CUstream s = nullptr;
    RETURN_IF_ERROR(DriverStatus(
        d_.StreamCreate(&s, driver::kStreamNonBlocking), "cuStreamCreate"));
    return reinterpret_cast<Stream>(s);
  }
  absl::Status DestroyStream(Stream stream) override {
    if (stream == 0) {
      return absl::InvalidArgumentError(
          "DestroyStream: stream 0 is the default stream, which is never "
          "destroyed");
    }
    RETURN_IF_ERROR(Bind(d_, ctx_));
    CublasLtGemm* lt = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      lt = lt_.get();
    }
    if (lt != nullptr) {
      // A later stream may get the same handle: its GEMMs must not share
      // a workspace with this one's still running.
      RETURN_IF_ERROR(DriverStatus(d_.StreamSynchronize(AsStream(stream)),
                                   "cuStreamSynchronize"));
      RETURN_IF_ERROR(lt->ReleaseStream(stream));
    }
    return DriverStatus(d_.StreamDestroy(AsStream(stream)), "cuStreamDestroy");
  }
  absl::Status SynchronizeStream(Stream stream) override {
    RETURN_IF_ERROR(RefuseWhileCapturing(stream, "SynchronizeStream"));
    RETURN_IF_ERROR(Bind(d_, ctx_));
    return DriverStatus(d_.StreamSynchronize(AsStream(stream)),
                        "cuStreamSynchronize");
  }
  absl::Status SynchronizeDevice() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!capturing_.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "SynchronizeDevice: stream ", capturing_.begin()->first,
            " is being captured into a graph; end the capture first"));
      }
    }
    RETURN_IF_ERROR(Bind(d_, ctx_));
    return DriverStatus(d_.CtxSynchronize(), "cuCtxSynchronize");
  }

  absl::StatusOr<Event> CreateEvent(EventTiming timing) override {
    RETURN_IF_ERROR(Bind(d_, ctx_));
    CUevent e = nullptr;
    RETURN_IF_ERROR(
        DriverStatus(d_.EventCreate(&e, timing == EventTiming::kOn
                                            ? driver::kEventDefault
                                            : driver::kEventDisableTiming),
                     "cuEventCreate"));
    return reinterpret_cast<Event>(e);
  }
  // Recorded while `stream` is captured, the event becomes an event-record
  // node that every launch of the graph records again (as in the host
  // emulator; the profiler times the kernels of graph replays with such
  // events); a plain cuEventRecord would only order work inside the capture.
  absl::Status RecordEvent(Event event, Stream stream) override {
    RETURN_IF_ERROR(Bind(d_, ctx_));
    bool captured = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      captured = capturing_.contains(stream);
    }
    if (!captured) {
      return DriverStatus(d_.EventRecord(AsEvent(event), AsStream(stream)),
                          "cuEventRecord");
    }
    if (d_.EventRecordWithFlags == nullptr) {
      return absl::UnimplementedError(
          "cuEventRecordWithFlags: this driver cannot record an event inside "
          "a CUDA graph (CUDA 11.1 or later can)");
    }
    return DriverStatus(
        d_.EventRecordWithFlags(AsEvent(event), AsStream(stream),
                                driver::kEventRecordExternal),
        "cuEventRecordWithFlags");
  }
  absl::StatusOr<bool> QueryEvent(Event event) override {
    RETURN_IF_ERROR(Bind(d_, ctx_));
    const CUresult r = d_.EventQuery(AsEvent(event));
    if (r == driver::kErrorNotReady) return false;
    RETURN_IF_ERROR(DriverStatus(r, "cuEventQuery"));
    return true;
  }
  absl::Status SynchronizeEvent(Event event) override {
    RETURN_IF_ERROR(Bind(d_, ctx_));
    return DriverStatus(d_.EventSynchronize(AsEvent(event)),
                        "cuEventSynchronize");
  }
  absl::Status StreamWaitEvent(Stream stream, Event event) override {
    RETURN_IF_ERROR(Bind(d_, ctx_));
    return DriverStatus(d_.StreamWaitEvent(AsStream(stream), AsEvent(event), 0),
                        "cuStreamWaitEvent");
  }
  absl::StatusOr<float> ElapsedMs(Event start, Event end) override {
    RETURN_IF_ERROR(Bind(d_, ctx_));
    float ms = 0;
    RETURN_IF_ERROR(
        DriverStatus(d_.EventElapsedTime(&ms, AsEvent(start), AsEvent(end)),
                     "cuEventElapsedTime"));
    return ms;
  }
  void DestroyEvent(Event event) override {
    if (event == 0 || !Bind(d_, ctx_).ok()) return;
    d_.EventDestroy(AsEvent(event));
  }

  absl::StatusOr<std::shared_ptr<LoadedModule>> LoadSource(
      const std::string& source, const std::string& name,
      const std::vector<std::string>& kernels) override {
    codegen::cuda::NvrtcOptions options;
    options.arch = arch_;
    ASSIGN_OR_RETURN(codegen::cuda::CompiledCuda compiled,
                     codegen::cuda::CompileCuda(source, name, options));
    RETURN_IF_ERROR(Bind(d_, ctx_));
    RelaxedCapture relaxed(d_);
    CUmodule module = nullptr;
    RETURN_IF_ERROR(DriverStatus(
        d_.ModuleLoadData(&module, compiled.cubin.data()),
        absl::StrCat("cuModuleLoadData(", name, ", ", arch_, ")")));
    // Resolve the kernels now, so that a missing one is reported here and
    // launches look up a map.
    absl::flat_hash_map<std::string, CUfunction> functions;
    for (const std::string& kernel : kernels) {
      CUfunction f = nullptr;
      const CUresult r = d_.ModuleGetFunction(&f, module, kernel.c_str());
      if (r != kSuccess) {
        d_.ModuleUnload(module);
        if (r == driver::kErrorNotFound) {
          return absl::NotFoundError(absl::StrCat(
              "CUDA module '", name, "' has no kernel '", kernel, "'"));
        }
        return DriverStatus(r,
                            absl::StrCat("cuModuleGetFunction(", kernel, ")"));
      }
      functions.emplace(kernel, f);
    }
    return std::shared_ptr<LoadedModule>(std::make_shared<DriverModule>(
        &d_, ctx_, module, name, std::move(functions)));
  }

  absl::Status Launch(KernelHandle kernel, int64_t grid, int block, void** args,
                      Stream stream) override {
    if (kernel.fn == nullptr || grid <= 0 || block <= 0 ||
        block > limits_.max_block) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Launch: expected a kernel, grid >= 1 and 1 <= block <= ",
          limits_.max_block, ", got ",
          kernel.fn == nullptr ? "no kernel, " : "", "grid ", grid, ", block ",
          block));
    }
    // Generated kernels loop over the grid, so fewer blocks still cover it.
    grid = std::min(grid, limits_.max_grid);
    RETURN_IF_ERROR(Bind(d_, ctx_));
    return DriverStatus(
        d_.LaunchKernel(kernel.fn, static_cast<unsigned>(grid), 1, 1,
                        static_cast<unsigned>(block), 1, 1, 0, AsStream(stream),
                        args, nullptr),
        absl::StrCat("cuLaunchKernel(", grid, " x ", block, ")"));
  }

  absl::Status Gemm(const DeviceGemmArgs& args, Stream stream) override {
    RETURN_IF_ERROR(Bind(d_, ctx_));
    ASSIGN_OR_RETURN(CublasLtGemm * lt, GetLt());
    uint64_t capture = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = capturing_.find(stream);
      if (it != capturing_.end()) capture = it->second;
    }
    return lt->Run(args, stream, capture);
  }

  absl::Status BeginCapture(Stream stream) override {
    if (stream == 0) {
      return absl::FailedPreconditionError(
          "BeginCapture: stream 0 (the legacy default stream) cannot be "
          "captured; capture a stream from CreateStream");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!capturing_.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("BeginCapture: stream ", capturing_.begin()->first,
                         " is already being captured; one capture at a time"));
      }
      capturing_.emplace(stream, ++captures_);
    }
    absl::Status st = Bind(d_, ctx_);
    if (st.ok()) {
      st = DriverStatus(d_.StreamBeginCapture(AsStream(stream),
                                              driver::kCaptureModeThreadLocal),
                        "cuStreamBeginCapture");
    }
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      capturing_.erase(stream);
    }
    return st;
  }
  absl::StatusOr<GraphHandle> EndCapture(Stream stream) override {
    uint64_t capture = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = capturing_.find(stream);
      if (it == capturing_.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "EndCapture: stream ", stream, " is not being captured"));
      }
      capture = it->second;
      capturing_.erase(it);
    }
    // A capture that ends without a graph gave its GEMMs a workspace that
    // nothing will use again.
    auto release = [&] {
      CublasLtGemm* lt = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu_);
        lt = lt_.get();
      }
      if (lt != nullptr) lt->ReleaseCapture(capture).IgnoreError();
    };
    RETURN_IF_ERROR(Bind(d_, ctx_));
    CUgraph graph = nullptr;
    absl::Status st = DriverStatus(
        d_.StreamEndCapture(AsStream(stream), &graph), "cuStreamEndCapture");
    if (!st.ok()) {
      release();
      return st;
    }
    CUgraphExec exec = nullptr;
    st = DriverStatus(d_.GraphInstantiate(&exec, graph, 0),
                      "cuGraphInstantiateWithFlags");
    // The executable graph is a snapshot; the recording is not needed.
    d_.GraphDestroy(graph);
    if (!st.ok()) {
      release();
      return st;
    }
    const auto handle = reinterpret_cast<GraphHandle>(exec);
    std::lock_guard<std::mutex> lock(mu_);
    graph_captures_[handle] = capture;
    return handle;
  }
  absl::Status LaunchGraph(GraphHandle graph, Stream stream) override {
    RETURN_IF_ERROR(Bind(d_, ctx_));
    return DriverStatus(
        d_.GraphLaunch(reinterpret_cast<CUgraphExec>(graph), AsStream(stream)),
        "cuGraphLaunch");
  }
  // Also frees the workspace the graph's GEMMs were captured with, once no
  // launch of it can be running (not while another capture is underway,
  // when synchronizing is not allowed: the workspace is then kept).
  void DestroyGraph(GraphHandle graph) override {
    if (graph == 0 || !Bind(d_, ctx_).ok()) return;
    d_.GraphExecDestroy(reinterpret_cast<CUgraphExec>(graph));
    uint64_t capture = 0;
    bool capturing = false;
    CublasLtGemm* lt = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = graph_captures_.find(graph);
      if (it == graph_captures_.end()) return;
      capture = it->second;
      graph_captures_.erase(it);
      capturing = !capturing_.empty();
      lt = lt_.get();
    }
    if (lt == nullptr || capturing) return;
    if (d_.CtxSynchronize() != 0) return;
    lt->ReleaseCapture(capture).IgnoreError();
  }

 private:
  absl::Status RefuseWhileCapturing(Stream stream, const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!capturing_.contains(stream)) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": stream ", stream,
                     " is being captured into a graph; end the capture first"));
  }

  absl::StatusOr<CublasLtGemm*> GetLt() {
    std::lock_guard<std::mutex> lock(mu_);
    if (lt_ == nullptr && lt_error_.ok()) {
      absl::StatusOr<std::unique_ptr<CublasLtGemm>> lt =
          CublasLtGemm::Create(this);
      if (lt.ok()) {
        lt_ = *std::move(lt);
      } else {
        lt_error_ = lt.status();
      }
    }
    if (lt_ == nullptr) return lt_error_;
    return lt_.get();
  }

  const driver::Api& d_;
  const CUcontext ctx_;
  const DeviceInfo info_;
  const int driver_version_;
  const std::string arch_;
  const BackendLimits limits_;

  std::mutex mu_;
  // Streams being captured, with the number of their capture.
  absl::flat_hash_map<Stream, uint64_t> capturing_;  // guarded by mu_
  uint64_t captures_ = 0;                            // guarded by mu_
  // The capture each live graph was made by (its GEMMs' workspace).
  absl::flat_hash_map<GraphHandle, uint64_t> graph_captures_;  // guarded by mu_
  std::unique_ptr<CublasLtGemm> lt_;                 // guarded by mu_
  absl::Status lt_error_;                            // guarded by mu_
};

// "sm_86" -> {8, 6}; "sm_100" -> {10, 0}.
bool ParseArch(absl::string_view arch, int& major, int& minor) {
  if (!absl::ConsumePrefix(&arch, "sm_") || arch.size() < 2) return false;
  int v = 0;
  if (!absl::SimpleAtoi(arch, &v)) return false;
  major = v / 10;
  minor = v % 10;
  return true;
}

}  // namespace

std::string PickKernelArch(const std::string& device_arch,
                           const std::vector<std::string>& supported) {
  if (std::find(supported.begin(), supported.end(), device_arch) !=
      supported.end()) {
    return device_arch;
  }
  int major = 0, minor = 0;
  if (!ParseArch(device_arch, major, minor)) return "";
  std::string best;
  int best_minor = -1;
  for (const std::string& a : supported) {
    int ma = 0, mi = 0;
    if (ParseArch(a, ma, mi) && ma == major && mi <= minor && mi > best_minor) {
      best = a;
      best_minor = mi;
    }
  }
  return best;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeDriverBackend(int ordinal) {
  ASSIGN_OR_RETURN(const driver::Api* d, DriverApi());
  ASSIGN_OR_RETURN(CUcontext ctx, UsePrimaryContext(ordinal));
  const CudaAvailability& a = Availability();
  const DeviceInfo& info = a.devices[ordinal];
  driver::CUdevice dev = 0;
  RETURN_IF_ERROR(DriverStatus(d->DeviceGet(&dev, ordinal),
                               absl::StrCat("cuDeviceGet(", ordinal, ")")));
  int max_block = 0, max_grid = 0;
  RETURN_IF_ERROR(DriverStatus(
      d->DeviceGetAttribute(&max_block, driver::kAttrMaxThreadsPerBlock, dev),
      "cuDeviceGetAttribute(MAX_THREADS_PER_BLOCK)"));
  RETURN_IF_ERROR(DriverStatus(
      d->DeviceGetAttribute(&max_grid, driver::kAttrMaxGridDimX, dev),
      "cuDeviceGetAttribute(MAX_GRID_DIM_X)"));
  BackendLimits limits;
  limits.max_block = max_block;
  limits.max_grid = max_grid;
  limits.preferred_block = std::min(256, max_block);

  std::string arch = info.arch();
  if (codegen::cuda::NvrtcAvailable()) {
    const std::vector<std::string> supported =
        codegen::cuda::NvrtcSupportedArchs();
    arch = PickKernelArch(info.arch(), supported);
    if (arch.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(codegen::cuda::NvrtcCompilerId(), " cannot compile for ",
                       info.name, " (", info.arch(), "); it supports ",
                       absl::StrJoin(supported, ", ")));
    }
  }
  return std::unique_ptr<Backend>(new CudaDriverBackend(
      d, ctx, info, a.driver_version, std::move(arch), limits));
}

}  // namespace stepjit::runtime::cuda
