// The host emulator Backend: host memory with provenance checks, host-compiled
// kernels and CPU GEMMs, queued on the streams of emulator_streams.h.
#include "testing/cuda_emulator/emulator_backend.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"
// The emulator runs GEMMs on the host with the CPU library.
#include "devices/cpu/gemm.h"
#include "testing/cuda_emulator/emulator_memory.h"
#include "testing/cuda_emulator/emulator_streams.h"
#include "testing/cuda_emulator/host_emulation.h"

namespace stepjit::runtime::cuda {
namespace {

using codegen::cuda::HostKernel;
using codegen::cuda::HostModule;
using StreamPtr = EmulatorStreams::StreamPtr;

constexpr int kMaxBlock = 1024;
constexpr uint64_t kKernelMagic = 0x73'6a'65'6d'6b'65'72'6eULL;

absl::string_view KindName(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice:
      return "host to device";
    case CopyKind::kDeviceToHost:
      return "device to host";
    case CopyKind::kDeviceToDevice:
      return "device to device";
  }
  return "?";
}

// A kernel handle's target: checked by Launch before use.
struct EmulatedKernel {
  uint64_t magic = kKernelMagic;
  HostKernel kernel;
};

class EmulatedModule : public LoadedModule {
 public:
  EmulatedModule(HostModule module, const std::vector<std::string>& kernels)
      : module_(std::move(module)) {
    for (const std::string& k : kernels) {
      absl::StatusOr<HostKernel> kernel = module_.Kernel(k);
      SJ_CHECK(kernel.ok(), kernel.status().message());
      kernels_[k] = std::make_unique<EmulatedKernel>(
          EmulatedKernel{kKernelMagic, *kernel});
    }
  }
  ~EmulatedModule() override {
    for (auto& [name, k] : kernels_) k->magic = 0;
  }

  absl::StatusOr<KernelHandle> Function(absl::string_view name) const override {
    auto it = kernels_.find(name);
    if (it == kernels_.end()) {
      return absl::NotFoundError(
          absl::StrCat("module ", module_.name(), " has no kernel ", name));
    }
    return KernelHandle{it->second.get()};
  }

 private:
  HostModule module_;
  absl::flat_hash_map<std::string, std::unique_ptr<EmulatedKernel>> kernels_;
};

class EmulatorBackend final : public Backend {
 public:
  explicit EmulatorBackend(EmulatorOptions options);
  ~EmulatorBackend() override;

  std::string Describe() const override {
    return absl::StrCat("host emulator (", options_.preferred_block,
                        "-thread blocks)");
  }
  std::string Arch() const override { return "host"; }
  BackendLimits Limits() const override {
    return {.max_block = kMaxBlock,
            .max_grid = options_.max_grid,
            .preferred_block = options_.preferred_block};
  }

  absl::StatusOr<void*> DeviceAlloc(size_t bytes) override;
  absl::Status DeviceFree(void* ptr) override;
  absl::StatusOr<void*> HostAllocPinned(size_t bytes) override;
  absl::Status HostFreePinned(void* ptr) override;

  absl::Status Copy(void* dst, const void* src, size_t bytes, CopyKind kind,
                    Stream stream) override;
  absl::Status Memset(void* dst, uint8_t value, size_t bytes,
                      Stream stream) override;

  // Streams, events and graphs are the queues' (emulator_streams.h).
  absl::StatusOr<Stream> CreateStream() override {
    return queues_.CreateStream();
  }
  absl::Status DestroyStream(Stream stream) override {
    return queues_.DestroyStream(stream);
  }
  absl::Status SynchronizeStream(Stream stream) override {
    return queues_.SynchronizeStream(stream);
  }
  absl::Status SynchronizeDevice() override {
    return queues_.SynchronizeDevice();
  }

  absl::StatusOr<Event> CreateEvent(EventTiming timing) override {
    return queues_.CreateEvent(timing == EventTiming::kOn);
  }
  absl::Status RecordEvent(Event event, Stream stream) override {
    return queues_.RecordEvent(event, stream);
  }
  absl::StatusOr<bool> QueryEvent(Event event) override {
    return queues_.QueryEvent(event);
  }
  absl::Status SynchronizeEvent(Event event) override {
    return queues_.SynchronizeEvent(event);
  }
  absl::Status StreamWaitEvent(Stream stream, Event event) override {
    return queues_.StreamWaitEvent(stream, event);
  }
  absl::StatusOr<float> ElapsedMs(Event start, Event end) override {
    return queues_.ElapsedMs(start, end);
  }
  void DestroyEvent(Event event) override { queues_.DestroyEvent(event); }

  absl::StatusOr<std::shared_ptr<LoadedModule>> LoadSource(
      const std::string& source, const std::string& name,
      const std::vector<std::string>& kernels) override;
  absl::Status Launch(KernelHandle kernel, int64_t grid, int block, void** args,
                      Stream stream) override;
  absl::Status Gemm(const DeviceGemmArgs& args, Stream stream) override;

  absl::Status BeginCapture(Stream stream) override {
    return queues_.BeginCapture(stream);
  }
  absl::StatusOr<GraphHandle> EndCapture(Stream stream) override {
    return queues_.EndCapture(stream);
  }
  absl::Status LaunchGraph(GraphHandle graph, Stream stream) override {
    return queues_.LaunchGraph(graph, stream);
  }
  void DestroyGraph(GraphHandle graph) override { queues_.DestroyGraph(graph); }

  EmulatorStats stats() const {
    return {launches_.load(),     queues_.graph_launches(), copies_.load(),
            bytes_copied_.load(), memsets_.load(),          gemms_.load()};
  }

 private:
  absl::Status Free(void* ptr, bool pinned);

  const EmulatorOptions options_;
  EmulatorMemory memory_;  // guarded by queues_.mu()
  EmulatorStreams queues_;

  std::atomic<int64_t> launches_{0}, copies_{0}, bytes_copied_{0}, memsets_{0},
      gemms_{0};
};

EmulatorBackend::EmulatorBackend(EmulatorOptions options) : options_(options) {}

EmulatorBackend::~EmulatorBackend() {
  queues_.Shutdown();  // before memory_ frees what queued work may still use
}

// ---- Memory ----

absl::StatusOr<void*> EmulatorBackend::DeviceAlloc(size_t bytes) {
  if (bytes == 0)
    return absl::InvalidArgumentError("DeviceAlloc: zero bytes requested");
  // (Allowed while capturing: the driver backend allocates in relaxed
  // capture mode, as the memory is no stream work.)
  std::lock_guard<std::mutex> lock(queues_.mu());
  const size_t in_use = memory_.device_bytes();
  if (bytes > options_.memory_limit_bytes -
                  std::min(in_use, options_.memory_limit_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "host emulator out of device memory: ", bytes, " bytes requested, ",
        in_use, " of the ", options_.memory_limit_bytes, "-byte limit in use"));
  }
  void* p = EmulatorMemory::AllocateHost(bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host emulator out of device memory: the host has no ",
                     bytes, " bytes"));
  }
  memory_.Add(p, bytes, /*pinned=*/false);
  return p;
}

absl::StatusOr<void*> EmulatorBackend::HostAllocPinned(size_t bytes) {
  if (bytes == 0)
    return absl::InvalidArgumentError("HostAllocPinned: zero bytes requested");
  void* p = EmulatorMemory::AllocateHost(bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HostAllocPinned: the host has no ", bytes, " bytes"));
  }
  std::lock_guard<std::mutex> lock(queues_.mu());
  memory_.Add(p, bytes, /*pinned=*/true);
  return p;
}

absl::Status EmulatorBackend::Free(void* ptr, bool pinned) {
  const char* call = pinned ? "HostFreePinned" : "DeviceFree";
  std::unique_lock<std::mutex> lock(queues_.mu());
  RETURN_IF_ERROR(queues_.CheckNotCapturing(call));
  RETURN_IF_ERROR(memory_.CheckStart(ptr, pinned, call));
  // Like cuMemFree and cuMemFreeHost: queued work that may use it runs first.
  queues_.DrainAll(lock);
  return memory_.Release(ptr, pinned, call);
}

absl::Status EmulatorBackend::DeviceFree(void* ptr) { return Free(ptr, false); }
absl::Status EmulatorBackend::HostFreePinned(void* ptr) {
  return Free(ptr, true);
}

// ---- Copies ----

absl::Status EmulatorBackend::Copy(void* dst, const void* src, size_t bytes,
                                   CopyKind kind, Stream stream) {
  const std::string call = absl::StrCat("Copy (", KindName(kind), ")");
  std::unique_lock<std::mutex> lock(queues_.mu());
  ASSIGN_OR_RETURN(StreamPtr s, queues_.FindStream(stream, call));
  if (bytes == 0) return absl::OkStatus();
  const void* host = nullptr;
  switch (kind) {
    case CopyKind::kHostToDevice:
      RETURN_IF_ERROR(memory_.CheckDevice(dst, bytes, call, "destination"));
      RETURN_IF_ERROR(memory_.CheckHost(src, call, "source"));
      host = src;
      break;
    case CopyKind::kDeviceToHost:
      RETURN_IF_ERROR(memory_.CheckDevice(src, bytes, call, "source"));
      RETURN_IF_ERROR(memory_.CheckHost(dst, call, "destination"));
      host = dst;
      break;
    case CopyKind::kDeviceToDevice:
      RETURN_IF_ERROR(memory_.CheckDevice(dst, bytes, call, "destination"));
      RETURN_IF_ERROR(memory_.CheckDevice(src, bytes, call, "source"));
      break;
  }
  const bool pageable =
      host != nullptr && memory_.Holding(host, bytes) == nullptr;
  const uint64_t seq = queues_.Submit(s, {.run = [this, dst, src, bytes] {
                                        std::memmove(dst, src, bytes);
                                        ++copies_;
                                        bytes_copied_ +=
                                            static_cast<int64_t>(bytes);
                                        return absl::OkStatus();
                                      }});
  // Pageable memory: the host buffer may be reused once the call returns.
  if (pageable && seq != 0) queues_.WaitFor(lock, {s, seq});
  return absl::OkStatus();
}

absl::Status EmulatorBackend::Memset(void* dst, uint8_t value, size_t bytes,
                                     Stream stream) {
  std::lock_guard<std::mutex> lock(queues_.mu());
  ASSIGN_OR_RETURN(StreamPtr s, queues_.FindStream(stream, "Memset"));
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(memory_.CheckDevice(dst, bytes, "Memset", "destination"));
  queues_.Submit(s, {.run = [this, dst, value, bytes] {
                   std::memset(dst, value, bytes);
                   ++memsets_;
                   return absl::OkStatus();
                 }});
  return absl::OkStatus();
}

// ---- Kernels and GEMMs ----

absl::StatusOr<std::shared_ptr<LoadedModule>> EmulatorBackend::LoadSource(
    const std::string& source, const std::string& name,
    const std::vector<std::string>& kernels) {
  if (!options_.fail_loads_with_prefix.empty() &&
      name.rfind(options_.fail_loads_with_prefix, 0) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     ": compile error (injected by "
                     "EmulatorOptions.fail_loads_with_prefix)"));
  }
  ASSIGN_OR_RETURN(HostModule module,
                   codegen::cuda::CompileForHost(source, name, kernels));
  return std::make_shared<EmulatedModule>(std::move(module), kernels);
}

absl::Status EmulatorBackend::Launch(KernelHandle kernel, int64_t grid,
                                     int block, void** args, Stream stream) {
  auto* k = static_cast<const EmulatedKernel*>(kernel.fn);
  if (k == nullptr || k->magic != kKernelMagic) {
    return absl::InvalidArgumentError(
        "Launch: the kernel handle is not a kernel of a loaded host emulator "
        "module");
  }
  if (grid < 1 || block < 1 || block > kMaxBlock) {
    return absl::InvalidArgumentError(
        absl::StrCat("Launch of ", k->kernel.name(), ": ", grid, " blocks of ",
                     block, " threads (1..", kMaxBlock, " per block)"));
  }
  // The values, not the caller's pointers to them: those may be gone when
  // the launch runs.
  auto packed = std::make_shared<std::vector<std::max_align_t>>(
      k->kernel.arg_bytes() / sizeof(std::max_align_t) + 1);
  k->kernel.PackArgs(args, packed->data());
  const int64_t blocks = std::min(grid, options_.max_grid);
  std::lock_guard<std::mutex> lock(queues_.mu());
  ASSIGN_OR_RETURN(StreamPtr s, queues_.FindStream(stream, "Launch"));
  queues_.Submit(
      s, {.run = [this, kernel = k->kernel, loaded = k->kernel.KeepLoaded(),
                  packed, blocks, block] {
        ++launches_;
        return kernel.Run(packed->data(), blocks, block);
      }});
  return absl::OkStatus();
}

absl::Status EmulatorBackend::Gemm(const DeviceGemmArgs& args, Stream stream) {
  std::lock_guard<std::mutex> lock(queues_.mu());
  ASSIGN_OR_RETURN(StreamPtr s, queues_.FindStream(stream, "Gemm"));
  const GemmArgs& g = args.gemm;
  RETURN_IF_ERROR(memory_.CheckDevice(g.a, 1, "Gemm", "A"));
  RETURN_IF_ERROR(memory_.CheckDevice(g.b, 1, "Gemm", "B"));
  RETURN_IF_ERROR(memory_.CheckDevice(g.c, 1, "Gemm", "C"));
  if (g.bias != nullptr)
    RETURN_IF_ERROR(memory_.CheckDevice(g.bias, 1, "Gemm", "bias"));
  if (g.bias_grad != nullptr)
    RETURN_IF_ERROR(memory_.CheckDevice(g.bias_grad, 1, "Gemm", "bias_grad"));
  GemmArgs host = g;
  host.backend = GemmBackend::kAuto;
  queues_.Submit(s, {.run = [this, host] {
                   ++gemms_;
                   return cpu::Gemm(host);
                 }});
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<Backend> MakeEmulatorBackend(EmulatorOptions options) {
  return std::make_unique<EmulatorBackend>(options);
}

bool IsEmulatorBackend(const Backend& backend) {
  return dynamic_cast<const EmulatorBackend*>(&backend) != nullptr;
}

EmulatorStats GetEmulatorStats(const Backend& backend) {
  const auto* emulator = dynamic_cast<const EmulatorBackend*>(&backend);
  SJ_CHECK(emulator != nullptr, "GetEmulatorStats of ", backend.Describe(),
           ", which is not the host emulator");
  return emulator->stats();
}

namespace {
// A program that links this library (an object library: every object is
// linked) offers the emulator to STEPJIT_CUDA_BACKEND=emulator.
const bool kRegistered = [] {
  RegisterEmulatorFactory([] { return MakeEmulatorBackend(); });
  return true;
}();
}  // namespace

}  // namespace stepjit::runtime::cuda
