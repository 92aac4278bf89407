// Aligned host allocation with live/peak accounting.
#include "runtime/storage.h"

#include <cstdlib>
#include <new>

#include "ir/status.h"

namespace stepjit {
namespace {
std::atomic<int64_t> g_allocated{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_num_allocs{0};
constexpr int64_t kAlignment = 64;
}  // namespace

Storage::Storage(int64_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  SJ_REQUIRE(device.is_cpu(), "tensor storage on ", device.str(),
             " is not available: this build supports only the cpu device");
  int64_t rounded = ((nbytes + kAlignment - 1) / kAlignment) * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded);
  if (data_ == nullptr) throw std::bad_alloc();
  int64_t now = g_allocated.fetch_add(nbytes) + nbytes;
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  g_num_allocs.fetch_add(1);
}

Storage::~Storage() {
  std::free(data_);
  g_allocated.fetch_sub(nbytes_);
}

MemoryStats GetCpuMemoryStats() {
  return {g_allocated.load(), g_peak.load(), g_num_allocs.load()};
}

void ResetCpuPeakMemory() { g_peak.store(g_allocated.load()); }

}  // namespace stepjit
