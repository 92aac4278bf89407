// Storage from the device runtime of its device (runtime/device_runtime.h),
// pinned host memory from the runtime that provides it, and the host
// memory accounting.
#include "runtime/storage.h"

#include <utility>

#include "ir/status.h"
#include "runtime/device_runtime.h"

namespace stepjit {
namespace {
std::atomic<int64_t> g_allocated{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_num_allocs{0};
std::atomic<int64_t> g_live_meta{0};
constexpr int64_t kPinnedAlignment = 64;
}  // namespace

Storage::Storage(int64_t nbytes, Device device, bool pinned)
    : pinned_(pinned), device_(device), nbytes_(nbytes) {
  if (!pinned) {
    data_ = runtime::GetDeviceRuntime(device.type).allocate(nbytes, device);
    return;
  }
  SJ_REQUIRE(device.is_cpu(), "pinned memory is host memory; ", device.str(),
             " storage cannot be pinned");
  const runtime::DeviceRuntime* rt = runtime::PinnedMemoryRuntime();
  SJ_REQUIRE(
      rt != nullptr,
      "pinned host memory: no device runtime provides page-locked memory");
  int64_t rounded =
      ((nbytes + kPinnedAlignment - 1) / kPinnedAlignment) * kPinnedAlignment;
  if (rounded == 0) rounded = kPinnedAlignment;
  data_ = rt->allocate_pinned(rounded);
  CountHostBytes(nbytes);
}

Storage::Storage(MetaTag, int64_t nbytes, Device device)
    : meta_(true), device_(device), nbytes_(nbytes) {
  g_live_meta.fetch_add(1, std::memory_order_relaxed);
}

void Storage::SwapMemory(Storage& other) {
  SJ_CHECK(nbytes_ == other.nbytes_ && device_ == other.device_ && !meta_ &&
               !other.meta_ && !pinned_ && !other.pinned_ &&
               pending_ == nullptr && other.pending_ == nullptr,
           "Storage::SwapMemory: the storages differ in size, device or kind");
  std::swap(data_, other.data_);
}

void Storage::Materialize() {
  SJ_CHECK(meta_, "Materialize: the storage already has memory");
  data_ = runtime::GetDeviceRuntime(device_.type).allocate(nbytes_, device_);
  meta_ = false;
  g_live_meta.fetch_sub(1, std::memory_order_relaxed);
}

Storage::~Storage() {
  if (meta_) {
    g_live_meta.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  if (pinned_) {
    runtime::PinnedMemoryRuntime()->release_pinned(data_);
    CountHostBytes(-nbytes_);
    return;
  }
  runtime::GetDeviceRuntime(device_.type).release(data_, nbytes_, device_);
}

void CountHostBytes(int64_t delta) {
  const int64_t now = g_allocated.fetch_add(delta) + delta;
  if (delta <= 0) return;
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  g_num_allocs.fetch_add(1);
}

MemoryStats GetCpuMemoryStats() {
  return {g_allocated.load(), g_peak.load(), g_num_allocs.load()};
}

int64_t LiveMetaStorages() { return g_live_meta.load(std::memory_order_relaxed); }

void ResetCpuPeakMemory() { g_peak.store(g_allocated.load()); }

}  // namespace stepjit
