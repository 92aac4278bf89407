// Host allocation with live/peak accounting; CUDA storage through the
// backend's caching allocator on the current stream.
#include "runtime/storage.h"

#include <cstdlib>
#include <new>

#include "ir/status.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/memory/pinned_pool.h"

namespace stepjit {
namespace {
std::atomic<int64_t> g_allocated{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_num_allocs{0};
std::atomic<int64_t> g_live_meta{0};
constexpr int64_t kAlignment = 64;

runtime::cuda::Backend& CudaBackendFor(Device device, const char* what) {
  absl::StatusOr<runtime::cuda::Backend*> b = runtime::cuda::RequireBackend();
  SJ_REQUIRE(b.ok(), what, " on ", device.str(), ": ", b.status().message());
  SJ_REQUIRE(device.index >= 0 && device.index < (*b)->DeviceCount(), what, " on ",
             device.str(), ": there are ", (*b)->DeviceCount(),
             " CUDA device(s) (", (*b)->Describe(), ")");
  return **b;
}
}  // namespace

Storage::Storage(int64_t nbytes, Device device, bool pinned)
    : nbytes_(nbytes), device_(device), pinned_(pinned) {
  SJ_REQUIRE(!(pinned && device.is_cuda()), "pinned memory is host memory; ",
             device.str(), " storage cannot be pinned");
  if (device.is_cuda()) {
    CudaBackendFor(device, "tensor storage");
    absl::StatusOr<void*> p = runtime::cuda::DeviceAllocator().Allocate(
        static_cast<size_t>(nbytes), runtime::cuda::CurrentStream());
    SJ_REQUIRE(p.ok(), "allocating ", nbytes, " bytes on ", device.str(), ": ",
               p.status().message());
    data_ = *p;
    return;
  }
  int64_t rounded = ((nbytes + kAlignment - 1) / kAlignment) * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  if (pinned) {
    CudaBackendFor(Device::cuda(0), "pinned host memory");
    absl::StatusOr<void*> p = runtime::cuda::AllocatePinned(static_cast<size_t>(rounded));
    SJ_REQUIRE(p.ok(), "allocating ", nbytes, " bytes of pinned host memory: ",
               p.status().message());
    data_ = *p;
  } else {
    data_ = std::aligned_alloc(kAlignment, rounded);
  }
  if (data_ == nullptr) throw std::bad_alloc();
  int64_t now = g_allocated.fetch_add(nbytes) + nbytes;
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  g_num_allocs.fetch_add(1);
}

Storage::Storage(MetaTag, int64_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), meta_(true) {
  g_live_meta.fetch_add(1, std::memory_order_relaxed);
}

Storage::~Storage() {
  if (meta_) {
    g_live_meta.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  if (device_.is_cuda()) {
    // The block may still be in use by queued work on the stream it was
    // allocated on; the allocator reuses it in that stream's order.
    if (!runtime::cuda::HoldFree(data_)) (void)runtime::cuda::DeviceAllocator().Free(data_);
    return;
  }
  if (pinned_) {
    runtime::cuda::FreePinned(data_);
  } else {
    std::free(data_);
  }
  g_allocated.fetch_sub(nbytes_);
}

MemoryStats GetCpuMemoryStats() {
  return {g_allocated.load(), g_peak.load(), g_num_allocs.load()};
}

int64_t LiveMetaStorages() { return g_live_meta.load(std::memory_order_relaxed); }

void ResetCpuPeakMemory() { g_peak.store(g_allocated.load()); }

}  // namespace stepjit
