// The process's CUDA backend: chosen once (STEPJIT_CUDA_BACKEND, else the
// driver when a device is present), with its caching allocator and the
// per-thread current stream.
#include "devices/cuda/backend.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "config/env.h"
#include "devices/cuda/driver/device.h"
#include "devices/cuda/driver/driver_backend.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {
namespace {

bool HoldActive();

// The caching allocator's raw memory and events, from a Backend.
class AllocatorBackend : public DeviceMemoryBackend {
 public:
  explicit AllocatorBackend(Backend* backend) : backend_(backend) {}
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    return backend_->DeviceAlloc(bytes);
  }
  absl::Status Free(void* ptr) override { return backend_->DeviceFree(ptr); }
  absl::StatusOr<Event> RecordEvent(Stream stream) override {
    // While a CUDA graph is captured an event on the capturing stream would
    // become part of the graph and could not be queried: blocks then stay
    // with their stream (the allocator's answer to having no events).
    if (HoldActive()) {
      return absl::UnavailableError("no cross-stream reuse while a CUDA graph is captured");
    }
    absl::StatusOr<Event> e = backend_->CreateEvent(Backend::EventTiming::kOff);
    if (!e.ok()) return e.status();
    absl::Status s = backend_->RecordEvent(*e, stream);
    if (!s.ok()) {
      backend_->DestroyEvent(*e);
      return s;
    }
    return *e;
  }
  absl::StatusOr<bool> QueryEvent(Event event) override {
    // Querying an event is illegal on a thread that is capturing (it
    // would invalidate the capture): pending blocks stay pending until
    // the capture has ended.
    if (HoldActive()) return false;
    return backend_->QueryEvent(event);
  }
  void DestroyEvent(Event event) override { backend_->DestroyEvent(event); }

 private:
  Backend* backend_;
};

struct Registry {
  std::mutex mu;
  bool detected = false;
  std::string why_none;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CachingAllocator> allocator;
  std::atomic<uint64_t> generation{0};
};

Registry& GetRegistry() {
  static Registry* r = new Registry;  // outlives static tensors
  return *r;
}

void Install(Registry& r, std::unique_ptr<Backend> backend) {
  r.generation.fetch_add(1);
  r.allocator.reset();
  r.backend = std::move(backend);
  if (r.backend != nullptr) {
    r.allocator = std::make_unique<CachingAllocator>(MakeAllocatorBackend(r.backend.get()));
  }
}

std::atomic<BackendFactory>& EmulatorFactorySlot() {
  static std::atomic<BackendFactory> factory{nullptr};
  return factory;
}
BackendFactory EmulatorFactory() { return EmulatorFactorySlot().load(); }

void Detect(Registry& r) {
  if (r.detected) return;
  r.detected = true;
  const absl::StatusOr<std::optional<std::string>> choice =
      config::GetChoice(config::Env::kCudaBackend);
  if (!choice.ok()) {
    r.why_none = std::string(choice.status().message());
    return;
  }
  if (*choice == "emulator") {
    if (EmulatorFactory() == nullptr) {
      r.why_none =
          "STEPJIT_CUDA_BACKEND=emulator, but this program does not link the "
          "host emulator (the test-support library stepjit_cuda_emulator, "
          "which the tests, stepjit-bench and the examples link; "
          "libstepjit.a leaves it out)";
      return;
    }
    Install(r, EmulatorFactory()());
    return;
  }
  if (!Availability().available) {
    r.why_none = Availability().reason;
    return;
  }
  absl::StatusOr<std::unique_ptr<Backend>> driver = MakeDriverBackend(0);
  if (!driver.ok()) {
    r.why_none = std::string(driver.status().message());
    return;
  }
  Install(r, std::move(*driver));
}

thread_local Stream t_stream = 0;

struct Held {
  std::mutex mu;
  bool active = false;
  std::vector<void*> ptrs;
};
Held& GetHeld() {
  static Held* h = new Held;
  return *h;
}

bool HoldActive() {
  Held& h = GetHeld();
  std::lock_guard<std::mutex> lock(h.mu);
  return h.active;
}

}  // namespace

void RegisterEmulatorFactory(BackendFactory factory) {
  EmulatorFactorySlot().store(factory);
}

std::unique_ptr<DeviceMemoryBackend> MakeAllocatorBackend(Backend* backend) {
  return std::make_unique<AllocatorBackend>(backend);
}

Backend* GetBackend() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  Detect(r);
  return r.backend.get();
}

absl::StatusOr<Backend*> RequireBackend() {
  Backend* b = GetBackend();
  if (b != nullptr) return b;
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return absl::FailedPreconditionError(absl::StrCat(
      "CUDA is not available: ", r.why_none,
      ". CPU tensors work; STEPJIT_CUDA_BACKEND=emulator runs CUDA code on "
      "the host in programs that link the test-support emulator"));
}

uint64_t BackendGeneration() {
  GetBackend();  // detection installs the first one
  return GetRegistry().generation.load();
}

Backend& BackendOrThrow() {
  absl::StatusOr<Backend*> b = RequireBackend();
  SJ_REQUIRE(b.ok(), b.status().message());
  return **b;
}

void SetBackend(std::unique_ptr<Backend> backend) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  Install(r, std::move(backend));
  r.detected = r.backend != nullptr;
  r.why_none.clear();
}

CachingAllocator& DeviceAllocator() {
  BackendOrThrow();
  return *GetRegistry().allocator;
}

FreeHold::FreeHold() {
  Held& h = GetHeld();
  std::lock_guard<std::mutex> lock(h.mu);
  SJ_CHECK(!h.active, "only one FreeHold may exist at a time");
  h.active = true;
}
FreeHold::~FreeHold() {
  std::vector<void*> left = Take();
  {
    Held& h = GetHeld();
    std::lock_guard<std::mutex> lock(h.mu);
    h.active = false;
  }
  for (void* p : left) (void)DeviceAllocator().Free(p);
}
std::vector<void*> FreeHold::Take() {
  Held& h = GetHeld();
  std::lock_guard<std::mutex> lock(h.mu);
  return std::exchange(h.ptrs, {});
}
bool CaptureUnderway() { return HoldActive(); }

bool HoldFree(void* ptr) {
  Held& h = GetHeld();
  std::lock_guard<std::mutex> lock(h.mu);
  if (!h.active) return false;
  h.ptrs.push_back(ptr);
  return true;
}

Stream CurrentStream() { return t_stream; }

StreamGuard::StreamGuard(Stream stream) : previous_(t_stream) { t_stream = stream; }
StreamGuard::~StreamGuard() { t_stream = previous_; }

}  // namespace stepjit::runtime::cuda
