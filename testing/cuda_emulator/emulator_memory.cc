// The host emulator's allocation table and the provenance checks against it.
#include "testing/cuda_emulator/emulator_memory.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stepjit::runtime::cuda {
namespace {

constexpr size_t kAlignment = 64;

std::string Hex(const void* p) { return absl::StrFormat("%p", p); }

}  // namespace

EmulatorMemory::~EmulatorMemory() {
  for (auto& [p, a] : allocations_) std::free(reinterpret_cast<void*>(p));
}

void* EmulatorMemory::AllocateHost(size_t bytes) {
  return std::aligned_alloc(kAlignment,
                            (bytes + kAlignment - 1) / kAlignment * kAlignment);
}

void EmulatorMemory::Add(void* p, size_t bytes, bool pinned) {
  allocations_[reinterpret_cast<uintptr_t>(p)] = {bytes, pinned};
  if (!pinned) device_bytes_ += bytes;
}

absl::Status EmulatorMemory::CheckStart(void* ptr, bool pinned,
                                        absl::string_view call) const {
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it != allocations_.end() && it->second.pinned == pinned)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      call, ": ", Hex(ptr), " is not the start of a live ",
      pinned ? "pinned host" : "device", " allocation of the host emulator"));
}

absl::Status EmulatorMemory::Release(void* ptr, bool pinned,
                                     absl::string_view call) {
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocations_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(call, ": ", Hex(ptr), " was freed twice concurrently"));
  }
  if (!pinned) device_bytes_ -= it->second.bytes;
  allocations_.erase(it);
  std::free(ptr);
  return absl::OkStatus();
}

const EmulatorMemory::Allocation* EmulatorMemory::Holding(const void* p,
                                                          size_t bytes) const {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  auto it = allocations_.upper_bound(u);
  if (it == allocations_.begin()) return nullptr;
  --it;
  if (u - it->first >= it->second.bytes && !(bytes == 0 && u == it->first))
    return nullptr;
  if (bytes > it->second.bytes - (u - it->first)) return nullptr;
  return &it->second;
}

absl::Status EmulatorMemory::CheckDevice(const void* p, size_t bytes,
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

absl::Status EmulatorMemory::CheckHost(const void* p, absl::string_view call,
                                       absl::string_view what) const {
  const Allocation* a = Holding(p, 1);
  if (a == nullptr || a->pinned) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(call, ": the ", what, " ", Hex(p),
                   " is device memory, but the copy kind says host memory"));
}

}  // namespace stepjit::runtime::cuda
