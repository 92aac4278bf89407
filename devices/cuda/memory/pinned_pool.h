// A caching allocator for page-locked host memory, in the spirit of
// PyTorch's CachingHostAllocator. Page-locking is slow and synchronizes the
// device, so blocks are kept and reused; a block freed while asynchronous
// copies may still read or write it becomes reusable only once events
// recorded after those copies have completed.
#ifndef STEPJIT_DEVICES_CUDA_MEMORY_PINNED_POOL_H_
#define STEPJIT_DEVICES_CUDA_MEMORY_PINNED_POOL_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "devices/cuda/backend.h"

namespace stepjit::runtime::cuda {

struct PinnedStats {
  int64_t backend_allocs = 0;  // blocks page-locked through the backend
  int64_t cache_hits = 0;      // allocations served from the cache
  size_t cached_bytes = 0;     // free or pending blocks held
};

// At least `bytes` of pinned memory (sizes round up to a power of two, at
// least 4 KiB) from GetBackend().
absl::StatusOr<void*> AllocatePinned(size_t bytes);
// Returns a block from AllocatePinned to the cache.
void FreePinned(void* ptr);
// Marks the block holding `ptr` as used by work queued on `stream` so far.
void RecordPinnedUse(void* ptr, Stream stream);
PinnedStats GetPinnedStats();
// Page-unlocks every idle cached block.
void EmptyPinnedCache();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_MEMORY_PINNED_POOL_H_
