// The host emulator Backend: host memory with provenance checks, one worker
// thread per stream, host-compiled kernels, CPU GEMMs and recorded graphs.
#include "runtime/cuda/emulator_backend.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/cuda/host_emulation.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {
namespace {

using Clock = std::chrono::steady_clock;
using codegen::cuda::HostKernel;
using codegen::cuda::HostModule;

constexpr size_t kAlignment = 64;
constexpr int kMaxBlock = 1024;
constexpr uint64_t kKernelMagic = 0x73'6a'65'6d'6b'65'72'6eULL;

std::string Hex(const void* p) { return absl::StrFormat("%p", p); }

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

  absl::StatusOr<Stream> CreateStream() override;
  absl::Status DestroyStream(Stream stream) override;
  absl::Status SynchronizeStream(Stream stream) override;
  absl::Status SynchronizeDevice() override;

  absl::StatusOr<Event> CreateEvent() override;
  absl::Status RecordEvent(Event event, Stream stream) override;
  absl::StatusOr<bool> QueryEvent(Event event) override;
  absl::Status SynchronizeEvent(Event event) override;
  absl::Status StreamWaitEvent(Stream stream, Event event) override;
  absl::StatusOr<float> ElapsedMs(Event start, Event end) override;
  void DestroyEvent(Event event) override;

  absl::StatusOr<std::shared_ptr<LoadedModule>> LoadSource(
      const std::string& source, const std::string& name,
      const std::vector<std::string>& kernels) override;
  absl::Status Launch(KernelHandle kernel, int64_t grid, int block, void** args,
                      Stream stream) override;
  absl::Status Gemm(const DeviceGemmArgs& args, Stream stream) override;

  absl::Status BeginCapture(Stream stream) override;
  absl::StatusOr<GraphHandle> EndCapture(Stream stream) override;
  absl::Status LaunchGraph(GraphHandle graph, Stream stream) override;
  void DestroyGraph(GraphHandle graph) override;

  EmulatorStats stats() const {
    return {launches_.load(),     graph_launches_.load(), copies_.load(),
            bytes_copied_.load(), memsets_.load(),        gemms_.load()};
  }

 private:
  struct StreamState;
  using StreamPtr = std::shared_ptr<StreamState>;
  // Satisfied once `stream` has completed its `seq`-th item.
  struct Dep {
    StreamPtr stream;
    uint64_t seq = 0;
  };
  // Where an event was last recorded; `when` is set as the marker runs.
  struct Mark {
    StreamPtr stream;
    uint64_t seq = 0;
    Clock::time_point when;
  };
  struct EventState {
    std::shared_ptr<Mark> latest;  // null until recorded
  };
  // Work as queued, or as recorded into a graph.
  struct Task {
    std::function<absl::Status()> run = nullptr;   // null: marker or wait
    std::shared_ptr<EventState> record = nullptr;  // RecordEvent's event
    std::vector<Dep> waits = {};  // StreamWaitEvent's dependency
  };
  struct Item {
    std::function<absl::Status()> run;
    std::vector<Dep> deps;
    std::shared_ptr<Mark> mark;
  };
  struct StreamState {
    Stream id = 0;
    std::deque<Item> queue;
    uint64_t submitted = 0, completed = 0;
    bool stop = false;
    std::condition_variable cv;                  // work queued or stop
    std::unique_ptr<std::vector<Task>> capture;  // non-null while capturing
    std::thread worker;
  };
  struct Allocation {
    size_t bytes = 0;
    bool pinned = false;
  };

  void Work(StreamState* s);
  StreamPtr NewStream(Stream id);
  // Queues `task` on `s` (or records it while `s` is captured); the item's
  // sequence number on `s`, 0 when recorded.
  uint64_t Submit(const StreamPtr& s, Task task);
  bool Done(const Dep& d) const { return d.stream->completed >= d.seq; }
  void WaitFor(std::unique_lock<std::mutex>& lock, const Dep& d) {
    done_cv_.wait(lock, [&] { return Done(d); });
  }
  absl::Status TakeError();
  absl::StatusOr<StreamPtr> FindStream(Stream stream, absl::string_view call);
  absl::StatusOr<std::shared_ptr<EventState>> FindEvent(Event event,
                                                        absl::string_view call);
  // The allocation holding [p, p + bytes), or null.
  const Allocation* Holding(const void* p, size_t bytes) const;
  absl::Status CheckDevice(const void* p, size_t bytes, absl::string_view call,
                           absl::string_view what) const;
  absl::Status CheckHost(const void* p, absl::string_view call,
                         absl::string_view what) const;
  absl::Status Free(void* ptr, bool pinned);
  // Waits for the work queued so far on every stream.
  void DrainAll(std::unique_lock<std::mutex>& lock);

  const EmulatorOptions options_;
  mutable std::mutex mu_;
  std::condition_variable done_cv_;  // an item completed
  absl::Status error_;               // first error of queued work, unreported
  absl::flat_hash_map<Stream, StreamPtr> streams_;
  Stream next_stream_ = 1;
  absl::flat_hash_map<Event, std::shared_ptr<EventState>> events_;
  Event next_event_ = 1;
  absl::flat_hash_map<GraphHandle, std::shared_ptr<std::vector<Task>>> graphs_;
  GraphHandle next_graph_ = 1;
  std::map<uintptr_t, Allocation> allocations_;  // by start address
  size_t device_bytes_ = 0;

  std::atomic<int64_t> launches_{0}, graph_launches_{0}, copies_{0},
      bytes_copied_{0}, memsets_{0}, gemms_{0};
};

EmulatorBackend::EmulatorBackend(EmulatorOptions options) : options_(options) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_[0] = NewStream(0);
}

EmulatorBackend::~EmulatorBackend() {
  std::vector<StreamPtr> streams;
  {
    std::unique_lock<std::mutex> lock(mu_);
    DrainAll(lock);
    for (auto& [id, s] : streams_) {
      s->stop = true;
      s->cv.notify_all();
      streams.push_back(s);
    }
  }
  for (const StreamPtr& s : streams) s->worker.join();
  for (auto& [p, a] : allocations_) std::free(reinterpret_cast<void*>(p));
}

EmulatorBackend::StreamPtr EmulatorBackend::NewStream(Stream id) {
  auto s = std::make_shared<StreamState>();
  s->id = id;
  s->worker = std::thread([this, raw = s.get()] { Work(raw); });
  return s;
}

void EmulatorBackend::Work(StreamState* s) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    s->cv.wait(lock, [&] { return s->stop || !s->queue.empty(); });
    if (s->queue.empty()) return;
    Item item = std::move(s->queue.front());
    s->queue.pop_front();
    for (const Dep& d : item.deps) WaitFor(lock, d);
    absl::Status status;
    if (item.run) {
      lock.unlock();
      status = item.run();
      lock.lock();
    }
    if (item.mark != nullptr) item.mark->when = Clock::now();
    if (!status.ok() && error_.ok()) error_ = status;
    ++s->completed;
    done_cv_.notify_all();
  }
}

uint64_t EmulatorBackend::Submit(const StreamPtr& s, Task task) {
  if (s->capture != nullptr) {
    s->capture->push_back(std::move(task));
    return 0;
  }
  Item item{std::move(task.run), std::move(task.waits), nullptr};
  // The legacy default stream: stream 0 and the other streams wait for each
  // other's earlier work.
  if (s->id == 0) {
    for (const auto& [id, other] : streams_) {
      if (id != 0 && other->submitted > other->completed)
        item.deps.push_back({other, other->submitted});
    }
  } else {
    const StreamPtr& legacy = streams_.at(0);
    if (legacy->submitted > legacy->completed)
      item.deps.push_back({legacy, legacy->submitted});
  }
  const uint64_t seq = ++s->submitted;
  if (task.record != nullptr) {
    item.mark = std::make_shared<Mark>(Mark{s, seq, {}});
    task.record->latest = item.mark;
  }
  s->queue.push_back(std::move(item));
  s->cv.notify_one();
  return seq;
}

absl::Status EmulatorBackend::TakeError() {
  return std::exchange(error_, absl::OkStatus());
}

void EmulatorBackend::DrainAll(std::unique_lock<std::mutex>& lock) {
  std::vector<Dep> all;
  for (const auto& [id, s] : streams_) all.push_back({s, s->submitted});
  for (const Dep& d : all) WaitFor(lock, d);
}

absl::StatusOr<EmulatorBackend::StreamPtr> EmulatorBackend::FindStream(
    Stream stream, absl::string_view call) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        call, ": stream ", stream, " is not a stream of the host emulator"));
  }
  return it->second;
}

absl::StatusOr<std::shared_ptr<EmulatorBackend::EventState>>
EmulatorBackend::FindEvent(Event event, absl::string_view call) {
  auto it = events_.find(event);
  if (it == events_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        call, ": event ", event, " is not an event of the host emulator"));
  }
  return it->second;
}

// ---- Memory ----

const EmulatorBackend::Allocation* EmulatorBackend::Holding(
    const void* p, size_t bytes) const {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  auto it = allocations_.upper_bound(u);
  if (it == allocations_.begin()) return nullptr;
  --it;
  if (u - it->first >= it->second.bytes && !(bytes == 0 && u == it->first))
    return nullptr;
  if (bytes > it->second.bytes - (u - it->first)) return nullptr;
  return &it->second;
}

absl::Status EmulatorBackend::CheckDevice(const void* p, size_t bytes,
                                          absl::string_view call,
                                          absl::string_view what) const {
  const Allocation* a = Holding(p, bytes);
  if (a != nullptr && !a->pinned) return absl::OkStatus();
  const Allocation* start = Holding(p, 1);
  return absl::InvalidArgumentError(absl::StrCat(
      call, ": the ", what, " ", Hex(p),
      start == nullptr ? " is not device memory of the host emulator"
      : start->pinned  ? " is pinned host memory, not device memory"
                       : absl::StrCat(" + ", bytes,
                                      " bytes runs past its device allocation"),
      " (a GPU would fault here)"));
}

absl::Status EmulatorBackend::CheckHost(const void* p, absl::string_view call,
                                        absl::string_view what) const {
  const Allocation* a = Holding(p, 1);
  if (a == nullptr || a->pinned) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(call, ": the ", what, " ", Hex(p),
                   " is device memory, but the copy kind says host memory"));
}

absl::StatusOr<void*> EmulatorBackend::DeviceAlloc(size_t bytes) {
  if (bytes == 0)
    return absl::InvalidArgumentError("DeviceAlloc: zero bytes requested");
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > options_.memory_limit_bytes -
                  std::min(device_bytes_, options_.memory_limit_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host emulator out of device memory: ", bytes,
                     " bytes requested, ", device_bytes_, " of the ",
                     options_.memory_limit_bytes, "-byte limit in use"));
  }
  void* p = std::aligned_alloc(
      kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host emulator out of device memory: the host has no ",
                     bytes, " bytes"));
  }
  allocations_[reinterpret_cast<uintptr_t>(p)] = {bytes, false};
  device_bytes_ += bytes;
  return p;
}

absl::StatusOr<void*> EmulatorBackend::HostAllocPinned(size_t bytes) {
  if (bytes == 0)
    return absl::InvalidArgumentError("HostAllocPinned: zero bytes requested");
  void* p = std::aligned_alloc(
      kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HostAllocPinned: the host has no ", bytes, " bytes"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  allocations_[reinterpret_cast<uintptr_t>(p)] = {bytes, true};
  return p;
}

absl::Status EmulatorBackend::Free(void* ptr, bool pinned) {
  const char* call = pinned ? "HostFreePinned" : "DeviceFree";
  std::unique_lock<std::mutex> lock(mu_);
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocations_.end() || it->second.pinned != pinned) {
    return absl::InvalidArgumentError(absl::StrCat(
        call, ": ", Hex(ptr), " is not the start of a live ",
        pinned ? "pinned host" : "device", " allocation of the host emulator"));
  }
  // Like cuMemFree and cuMemFreeHost: queued work that may use it runs first.
  DrainAll(lock);
  it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocations_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(call, ": ", Hex(ptr), " was freed twice concurrently"));
  }
  if (!pinned) device_bytes_ -= it->second.bytes;
  allocations_.erase(it);
  std::free(ptr);
  return absl::OkStatus();
}

absl::Status EmulatorBackend::DeviceFree(void* ptr) { return Free(ptr, false); }
absl::Status EmulatorBackend::HostFreePinned(void* ptr) {
  return Free(ptr, true);
}

// ---- Copies ----

absl::Status EmulatorBackend::Copy(void* dst, const void* src, size_t bytes,
                                   CopyKind kind, Stream stream) {
  const std::string call = absl::StrCat("Copy (", KindName(kind), ")");
  std::unique_lock<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, call));
  if (bytes == 0) return absl::OkStatus();
  const void* host = nullptr;
  switch (kind) {
    case CopyKind::kHostToDevice:
      RETURN_IF_ERROR(CheckDevice(dst, bytes, call, "destination"));
      RETURN_IF_ERROR(CheckHost(src, call, "source"));
      host = src;
      break;
    case CopyKind::kDeviceToHost:
      RETURN_IF_ERROR(CheckDevice(src, bytes, call, "source"));
      RETURN_IF_ERROR(CheckHost(dst, call, "destination"));
      host = dst;
      break;
    case CopyKind::kDeviceToDevice:
      RETURN_IF_ERROR(CheckDevice(dst, bytes, call, "destination"));
      RETURN_IF_ERROR(CheckDevice(src, bytes, call, "source"));
      break;
  }
  const bool pageable = host != nullptr && Holding(host, bytes) == nullptr;
  const uint64_t seq = Submit(s, {.run = [this, dst, src, bytes] {
                                std::memmove(dst, src, bytes);
                                ++copies_;
                                bytes_copied_ += static_cast<int64_t>(bytes);
                                return absl::OkStatus();
                              }});
  // Pageable memory: the host buffer may be reused once the call returns.
  if (pageable && seq != 0) WaitFor(lock, {s, seq});
  return absl::OkStatus();
}

absl::Status EmulatorBackend::Memset(void* dst, uint8_t value, size_t bytes,
                                     Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "Memset"));
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckDevice(dst, bytes, "Memset", "destination"));
  Submit(s, {.run = [this, dst, value, bytes] {
           std::memset(dst, value, bytes);
           ++memsets_;
           return absl::OkStatus();
         }});
  return absl::OkStatus();
}

// ---- Streams and events ----

absl::StatusOr<Stream> EmulatorBackend::CreateStream() {
  std::lock_guard<std::mutex> lock(mu_);
  const Stream id = next_stream_++;
  streams_[id] = NewStream(id);
  return id;
}

absl::Status EmulatorBackend::DestroyStream(Stream stream) {
  StreamPtr s;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stream == 0)
      return absl::InvalidArgumentError(
          "DestroyStream: stream 0 is the default stream");
    ASSIGN_OR_RETURN(s, FindStream(stream, "DestroyStream"));
    if (s->capture != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("DestroyStream: stream ", stream, " is being captured"));
    }
    WaitFor(lock, {s, s->submitted});
    s->stop = true;
    s->cv.notify_all();
    streams_.erase(stream);
  }
  s->worker.join();
  return absl::OkStatus();
}

absl::Status EmulatorBackend::SynchronizeStream(Stream stream) {
  std::unique_lock<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "SynchronizeStream"));
  if (s->capture != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SynchronizeStream: stream ", stream,
        " is being captured into a graph (CUDA: operation not permitted when "
        "stream is capturing)"));
  }
  WaitFor(lock, {s, s->submitted});
  return TakeError();
}

absl::Status EmulatorBackend::SynchronizeDevice() {
  std::unique_lock<std::mutex> lock(mu_);
  for (const auto& [id, s] : streams_) {
    if (s->capture != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "SynchronizeDevice: stream ", id, " is being captured into a graph"));
    }
  }
  DrainAll(lock);
  return TakeError();
}

absl::StatusOr<Event> EmulatorBackend::CreateEvent() {
  std::lock_guard<std::mutex> lock(mu_);
  const Event id = next_event_++;
  events_[id] = std::make_shared<EventState>();
  return id;
}

absl::Status EmulatorBackend::RecordEvent(Event event, Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> e,
                   FindEvent(event, "RecordEvent"));
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "RecordEvent"));
  Submit(s, {.record = std::move(e)});
  return absl::OkStatus();
}

absl::StatusOr<bool> EmulatorBackend::QueryEvent(Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> e,
                   FindEvent(event, "QueryEvent"));
  return e->latest == nullptr || Done({e->latest->stream, e->latest->seq});
}

absl::Status EmulatorBackend::SynchronizeEvent(Event event) {
  std::unique_lock<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> e,
                   FindEvent(event, "SynchronizeEvent"));
  if (e->latest == nullptr) return absl::OkStatus();
  WaitFor(lock, {e->latest->stream, e->latest->seq});
  return TakeError();
}

absl::Status EmulatorBackend::StreamWaitEvent(Stream stream, Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> e,
                   FindEvent(event, "StreamWaitEvent"));
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "StreamWaitEvent"));
  if (e->latest == nullptr) return absl::OkStatus();  // as in CUDA
  Submit(s, {.waits = {{e->latest->stream, e->latest->seq}}});
  return absl::OkStatus();
}

absl::StatusOr<float> EmulatorBackend::ElapsedMs(Event start, Event end) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> a,
                   FindEvent(start, "ElapsedMs"));
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> b, FindEvent(end, "ElapsedMs"));
  for (const auto& e : {a, b}) {
    if (e->latest == nullptr) {
      return absl::InvalidArgumentError(
          "ElapsedMs: an event has not been recorded");
    }
    if (!Done({e->latest->stream, e->latest->seq})) {
      return absl::FailedPreconditionError(
          "ElapsedMs: an event has not completed yet (CUDA: not ready)");
    }
  }
  return std::chrono::duration<float, std::milli>(b->latest->when -
                                                  a->latest->when)
      .count();
}

void EmulatorBackend::DestroyEvent(Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.erase(event);  // queued markers keep their state alive
}

// ---- Kernels and GEMMs ----

absl::StatusOr<std::shared_ptr<LoadedModule>> EmulatorBackend::LoadSource(
    const std::string& source, const std::string& name,
    const std::vector<std::string>& kernels) {
  if (!options_.fail_loads_with_prefix.empty() &&
      name.rfind(options_.fail_loads_with_prefix, 0) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": compile error (injected by EmulatorOptions.fail_loads_with_prefix)"));
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
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "Launch"));
  Submit(s, {.run = [this, kernel = k->kernel, loaded = k->kernel.KeepLoaded(),
                     packed, blocks, block] {
           ++launches_;
           return kernel.Run(packed->data(), blocks, block);
         }});
  return absl::OkStatus();
}

absl::Status EmulatorBackend::Gemm(const DeviceGemmArgs& args, Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "Gemm"));
  const cpu::GemmArgs& g = args.gemm;
  RETURN_IF_ERROR(CheckDevice(g.a, 1, "Gemm", "A"));
  RETURN_IF_ERROR(CheckDevice(g.b, 1, "Gemm", "B"));
  RETURN_IF_ERROR(CheckDevice(g.c, 1, "Gemm", "C"));
  if (g.bias != nullptr)
    RETURN_IF_ERROR(CheckDevice(g.bias, 1, "Gemm", "bias"));
  cpu::GemmArgs host = g;
  host.backend = cpu::GemmBackend::kAuto;
  Submit(s, {.run = [this, host] {
           ++gemms_;
           return cpu::Gemm(host);
         }});
  return absl::OkStatus();
}

// ---- Graphs ----

absl::Status EmulatorBackend::BeginCapture(Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "BeginCapture"));
  for (const auto& [id, other] : streams_) {
    if (other->capture != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "BeginCapture: stream ", id,
          " is already being captured; the host emulator captures one stream "
          "at a time"));
    }
  }
  s->capture = std::make_unique<std::vector<Task>>();
  return absl::OkStatus();
}

absl::StatusOr<GraphHandle> EmulatorBackend::EndCapture(Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "EndCapture"));
  if (s->capture == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("EndCapture: stream ", stream, " is not being captured"));
  }
  const GraphHandle id = next_graph_++;
  graphs_[id] = std::shared_ptr<std::vector<Task>>(std::move(s->capture));
  return id;
}

absl::Status EmulatorBackend::LaunchGraph(GraphHandle graph, Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "LaunchGraph"));
  auto it = graphs_.find(graph);
  if (it == graphs_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LaunchGraph: ", graph, " is not a graph of the host emulator"));
  }
  Submit(s, {.run = [this] {
           ++graph_launches_;
           return absl::OkStatus();
         }});
  for (const Task& t : *it->second) Submit(s, t);
  return absl::OkStatus();
}

void EmulatorBackend::DestroyGraph(GraphHandle graph) {
  std::lock_guard<std::mutex> lock(mu_);
  graphs_.erase(graph);  // queued replays hold copies of the work
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

}  // namespace stepjit::runtime::cuda
