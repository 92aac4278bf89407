// Cached page-locked host blocks, reused once the copies that used them are
// done.
#include "devices/cuda/memory/pinned_pool.h"

#include <map>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {
namespace {

constexpr size_t kMinBlock = size_t{4} << 10;

struct Block {
  size_t size = 0;
  bool live = false;
  std::vector<Event> uses;  // events after the copies that used the block
};

struct Pool {
  std::mutex mu;
  uint64_t generation = 0;  // BackendGeneration() the blocks belong to
  absl::flat_hash_map<void*, Block> blocks;
  std::multimap<size_t, void*> idle;  // freed blocks by size (uses may be pending)
  PinnedStats stats;
};

Pool& GetPool() {
  static Pool* p = new Pool;
  return *p;
}

// A pool belongs to one backend; a new backend starts afresh (the old one's
// blocks went with it).
void Adopt(Pool& p) {
  const uint64_t generation = BackendGeneration();
  if (p.generation == generation) return;
  p.blocks.clear();
  p.idle.clear();
  p.stats = PinnedStats();
  p.generation = generation;
}

size_t RoundUp(size_t bytes) {
  size_t size = kMinBlock;
  while (size < bytes) size <<= 1;
  return size;
}

// True once every recorded use has completed (their events are destroyed).
bool Idle(Backend& b, Block& block) {
  for (size_t i = 0; i < block.uses.size();) {
    absl::StatusOr<bool> done = b.QueryEvent(block.uses[i]);
    if (!done.ok() || !*done) return false;
    b.DestroyEvent(block.uses[i]);
    block.uses[i] = block.uses.back();
    block.uses.pop_back();
  }
  return true;
}

}  // namespace

absl::StatusOr<void*> AllocatePinned(size_t bytes) {
  ASSIGN_OR_RETURN(Backend * b, RequireBackend());
  const size_t size = RoundUp(bytes);
  Pool& p = GetPool();
  std::lock_guard<std::mutex> lock(p.mu);
  Adopt(p);
  auto [first, last] = p.idle.equal_range(size);
  for (auto it = first; it != last; ++it) {
    Block& block = p.blocks.at(it->second);
    if (!Idle(*b, block)) continue;
    void* ptr = it->second;
    p.idle.erase(it);
    block.live = true;
    p.stats.cached_bytes -= size;
    ++p.stats.cache_hits;
    return ptr;
  }
  ASSIGN_OR_RETURN(void* ptr, b->HostAllocPinned(size));
  p.blocks[ptr] = Block{.size = size, .live = true, .uses = {}};
  ++p.stats.backend_allocs;
  return ptr;
}

void FreePinned(void* ptr) {
  Pool& p = GetPool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.generation != BackendGeneration()) return;  // its backend is gone
  auto it = p.blocks.find(ptr);
  if (it == p.blocks.end() || !it->second.live) return;
  it->second.live = false;
  p.idle.emplace(it->second.size, ptr);
  p.stats.cached_bytes += it->second.size;
}

void RecordPinnedUse(void* ptr, Stream stream) {
  Backend* b = GetBackend();
  if (b == nullptr) return;
  Pool& p = GetPool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.generation != BackendGeneration()) return;
  auto it = p.blocks.find(ptr);
  if (it == p.blocks.end()) return;
  absl::StatusOr<Event> e = b->CreateEvent(Backend::EventTiming::kOff);
  if (!e.ok()) return;
  if (!b->RecordEvent(*e, stream).ok()) {
    b->DestroyEvent(*e);
    return;
  }
  it->second.uses.push_back(*e);
}

PinnedStats GetPinnedStats() {
  Pool& p = GetPool();
  std::lock_guard<std::mutex> lock(p.mu);
  Adopt(p);  // a new backend's pool starts empty
  return p.stats;
}

void EmptyPinnedCache() {
  Backend* b = GetBackend();
  if (b == nullptr) return;
  Pool& p = GetPool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.generation != BackendGeneration()) return;
  for (auto it = p.idle.begin(); it != p.idle.end();) {
    Block& block = p.blocks.at(it->second);
    if (!Idle(*b, block)) {
      ++it;
      continue;
    }
    (void)b->HostFreePinned(it->second);
    p.stats.cached_bytes -= block.size;
    p.blocks.erase(it->second);
    it = p.idle.erase(it);
  }
}

}  // namespace stepjit::runtime::cuda
