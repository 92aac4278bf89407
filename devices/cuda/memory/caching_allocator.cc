// The caching allocator's pools, splitting, merging and stream bookkeeping.
#include "devices/cuda/memory/caching_allocator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {

namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Larger requests could overflow the rounding; no device has such memory.
constexpr size_t kMaxRequest = std::numeric_limits<size_t>::max() / 2;

}  // namespace

bool CachingAllocator::BlockLess::operator()(const Block* a,
                                             const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) <
         reinterpret_cast<uintptr_t>(b->ptr);
}

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceMemoryBackend> backend,
                                   Options options)
    : backend_(std::move(backend)), options_(options) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [stream, sync] : sync_) {
    if (sync.in_flight) backend_->DestroyEvent(sync.event);
  }
  for (Block* b : pending_) {
    for (Event e : b->use_events) backend_->DestroyEvent(e);
  }
  for (auto& [base, seg] : segments_) {
    // Nothing can report a failure from a destructor; the driver frees the
    // context's memory at exit anyway.
    backend_->Free(seg->base).IgnoreError();
    for (Block* b = seg->head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

size_t CachingAllocator::RoundSize(size_t bytes) {
  return bytes == 0 ? kMinBlockSize : RoundUp(bytes, kMinBlockSize);
}

size_t CachingAllocator::SegmentSize(size_t bytes) {
  const size_t size = RoundSize(bytes);
  return size <= kSmallSize ? kSmallBuffer : RoundUp(size, kLargeRounding);
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes, Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > kMaxRequest) {
    ++stats_.num_ooms;
    return absl::ResourceExhaustedError(
        absl::StrCat("out of device memory: cannot allocate ", bytes,
                     " bytes, more than any device has"));
  }
  RETURN_IF_ERROR(ProcessEvents());
  const size_t size = RoundSize(bytes);
  const bool small = size <= kSmallSize;
  Pool& pool = small ? small_pool_ : large_pool_;
  Block* b = FindOwn(pool, stream, size);
  if (b == nullptr) b = FindIdleOther(pool, stream, size);
  if (b != nullptr) {
    pool.erase(b);
    ++stats_.num_cache_hits;
  } else {
    ASSIGN_OR_RETURN(b, NewSegment(pool, size, stream, bytes));
  }
  Split(b, size, small);
  b->stream = stream;
  b->state = State::kAllocated;
  live_[b->ptr] = b;
  ++stats_.num_allocs;
  stats_.allocated_bytes += b->size;
  stats_.peak_allocated_bytes =
      std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return static_cast<void*>(b->ptr);
}

absl::Status CachingAllocator::Free(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CheckLive(ptr, "Free"));
  Block* b = live_.at(ptr);
  std::vector<Event> events;
  for (Stream s : b->stream_uses) {
    absl::StatusOr<Event> e = backend_->RecordEvent(s);
    if (!e.ok()) {
      for (Event done : events) backend_->DestroyEvent(done);
      return absl::Status(
          e.status().code(),
          absl::StrFormat("Free(%p): cannot record its use on stream %#x: %s",
                          ptr, s, e.status().message()));
    }
    events.push_back(*e);
  }
  live_.erase(ptr);
  ++stats_.num_frees;
  stats_.allocated_bytes -= b->size;
  if (events.empty()) {
    ReturnToPool(b);
  } else {
    b->state = State::kPending;
    b->use_events = std::move(events);
    pending_.push_back(b);
  }
  return absl::OkStatus();
}

absl::Status CachingAllocator::RecordStream(void* ptr, Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CheckLive(ptr, "RecordStream"));
  Block* b = live_.at(ptr);
  if (stream != b->stream &&
      std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) ==
          b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
  return absl::OkStatus();
}

absl::Status CachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(ProcessEvents());
  return ReleaseCachedSegments();
}

MemoryStats CachingAllocator::memory_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::ResetPeakStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

absl::Status CachingAllocator::ProcessEvents() {
  for (auto& [stream, sync] : sync_) {
    if (!sync.in_flight) continue;
    ASSIGN_OR_RETURN(bool done, backend_->QueryEvent(sync.event));
    if (!done) continue;
    backend_->DestroyEvent(sync.event);
    sync.in_flight = false;
    sync.completed_seq = std::max(sync.completed_seq, sync.event_seq);
  }
  // In place, so that a failed query leaves a consistent state behind.
  for (size_t i = 0; i < pending_.size();) {
    Block* b = pending_[i];
    std::vector<Event>& events = b->use_events;
    for (size_t j = 0; j < events.size();) {
      ASSIGN_OR_RETURN(bool done, backend_->QueryEvent(events[j]));
      if (!done) {
        ++j;
        continue;
      }
      backend_->DestroyEvent(events[j]);
      events[j] = events.back();
      events.pop_back();
    }
    if (!events.empty()) {
      ++i;
      continue;
    }
    ReturnToPool(b);
    pending_[i] = pending_.back();
    pending_.pop_back();
  }
  return absl::OkStatus();
}

bool CachingAllocator::IsIdle(const Block* b) const {
  auto it = sync_.find(b->stream);
  return b->free_seq <= (it == sync_.end() ? 0 : it->second.completed_seq);
}

CachingAllocator::Block* CachingAllocator::FindOwn(Pool& pool, Stream stream,
                                                   size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  return it != pool.end() && (*it)->stream == stream ? *it : nullptr;
}

CachingAllocator::Block* CachingAllocator::FindIdleOther(Pool& pool,
                                                         Stream stream,
                                                         size_t size) {
  Block* best = nullptr;
  Block key;
  for (auto group = pool.begin(); group != pool.end();) {
    const Stream other = (*group)->stream;
    key.stream = other;
    key.size = std::numeric_limits<size_t>::max();
    key.ptr = reinterpret_cast<char*>(std::numeric_limits<uintptr_t>::max());
    auto next_group = pool.upper_bound(&key);
    if (other == stream) {
      group = next_group;
      continue;
    }
    key.size = size;
    key.ptr = nullptr;
    // The smallest idle fit of this stream; if there are fits but none is
    // idle yet, ask for an event on the stream and look once more (an idle
    // stream completes it at once).
    for (int attempt = 0; attempt < 2; ++attempt) {
      bool busy_fit = false;
      for (auto it = pool.lower_bound(&key);
           it != pool.end() && (*it)->stream == other; ++it) {
        if (IsIdle(*it)) {
          if (best == nullptr || (*it)->size < best->size) best = *it;
          busy_fit = false;
          break;
        }
        busy_fit = true;
      }
      if (!busy_fit) break;
      StreamSync& sync = sync_[other];
      if (!sync.in_flight) {
        absl::StatusOr<Event> e = backend_->RecordEvent(other);
        // Without events (the driver backend) blocks stay with their stream.
        if (!e.ok()) break;
        sync.in_flight = true;
        sync.event = *e;
        sync.event_seq = free_seq_;
      }
      absl::StatusOr<bool> done = backend_->QueryEvent(sync.event);
      if (!done.ok() || !*done) break;
      backend_->DestroyEvent(sync.event);
      sync.in_flight = false;
      sync.completed_seq = std::max(sync.completed_seq, sync.event_seq);
    }
    group = next_group;
  }
  return best;
}

absl::StatusOr<char*> CachingAllocator::BackendAllocate(size_t bytes) {
  if (bytes > options_.limit_bytes ||
      stats_.reserved_bytes > options_.limit_bytes - bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("reserving ", bytes, " more bytes would pass the limit"));
  }
  ASSIGN_OR_RETURN(void* p, backend_->Allocate(bytes));
  return static_cast<char*>(p);
}

absl::StatusOr<CachingAllocator::Block*> CachingAllocator::NewSegment(
    Pool& pool, size_t rounded, Stream stream, size_t requested) {
  const size_t seg_size = SegmentSize(rounded);
  absl::StatusOr<char*> mem = BackendAllocate(seg_size);
  if (absl::IsResourceExhausted(mem.status())) {
    RETURN_IF_ERROR(ReleaseCachedSegments());
    mem = BackendAllocate(seg_size);
  }
  if (!mem.ok()) {
    if (!absl::IsResourceExhausted(mem.status())) return mem.status();
    ++stats_.num_ooms;
    const std::string limit =
        options_.limit_bytes == std::numeric_limits<size_t>::max()
            ? std::string("none")
            : absl::StrCat(options_.limit_bytes, " bytes");
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of device memory: cannot allocate ", requested,
        " bytes (a segment of ", seg_size, " bytes) after freeing the cache; ",
        stats_.allocated_bytes, " bytes allocated, ", stats_.reserved_bytes,
        " bytes reserved, limit ", limit,
        "; backend: ", mem.status().message()));
  }
  auto seg = std::make_unique<Segment>();
  seg->base = *mem;
  seg->size = seg_size;
  seg->pool = &pool;
  auto* b = new Block;
  b->ptr = seg->base;
  b->size = seg_size;
  b->stream = stream;
  b->segment = seg.get();
  seg->head = b;
  segments_[reinterpret_cast<uintptr_t>(seg->base)] = std::move(seg);
  stats_.reserved_bytes += seg_size;
  stats_.peak_reserved_bytes =
      std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return b;
}

void CachingAllocator::Split(Block* b, size_t size, bool small) {
  const size_t rest_size = b->size - size;
  // A large-pool rest under 1 MiB could only serve small requests, which
  // the small pool serves; keeping it in the block wastes less than a split.
  if (small ? rest_size < kMinBlockSize : rest_size <= kSmallSize) return;
  auto* rest = new Block;
  rest->ptr = b->ptr + size;
  rest->size = rest_size;
  rest->stream = b->stream;
  rest->free_seq = b->free_seq;
  rest->segment = b->segment;
  rest->prev = b;
  rest->next = b->next;
  if (b->next != nullptr) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  b->segment->pool->insert(rest);
}

void CachingAllocator::ReturnToPool(Block* b) {
  b->state = State::kFree;
  b->free_seq = ++free_seq_;
  b->stream_uses.clear();
  Pool& pool = *b->segment->pool;
  // A neighbour of another stream is merged only when idle: the merged
  // block then needs no more than b's own stream ordering.
  for (Block* nb : {b->prev, b->next}) {
    if (nb == nullptr || nb->state != State::kFree ||
        (nb->stream != b->stream && !IsIdle(nb))) {
      continue;
    }
    pool.erase(nb);
    if (nb == b->prev) {
      b->ptr = nb->ptr;
      b->prev = nb->prev;
      if (b->prev != nullptr) {
        b->prev->next = b;
      } else {
        b->segment->head = b;
      }
    } else {
      b->next = nb->next;
      if (b->next != nullptr) b->next->prev = b;
    }
    b->size += nb->size;
    delete nb;
  }
  pool.insert(b);
}

absl::Status CachingAllocator::ReleaseCachedSegments() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    Segment* seg = it->second.get();
    bool unused = true;
    for (Block* b = seg->head; b != nullptr && unused; b = b->next)
      unused = b->state == State::kFree;
    if (!unused) {
      ++it;
      continue;
    }
    RETURN_IF_ERROR(backend_->Free(seg->base));
    for (Block* b = seg->head; b != nullptr;) {
      Block* next = b->next;
      seg->pool->erase(b);
      delete b;
      b = next;
    }
    stats_.reserved_bytes -= seg->size;
    it = segments_.erase(it);
  }
  return absl::OkStatus();
}

CachingAllocator::Segment* CachingAllocator::SegmentOf(const void* ptr) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = segments_.upper_bound(p);
  if (it == segments_.begin()) return nullptr;
  --it;
  return p < it->first + it->second->size ? it->second.get() : nullptr;
}

absl::Status CachingAllocator::CheckLive(void* ptr, const char* what) const {
  if (live_.contains(ptr)) return absl::OkStatus();
  const Segment* seg = SegmentOf(ptr);
  if (seg == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s(%p): unknown pointer, not allocated by this caching allocator",
        what, ptr));
  }
  for (const Block* b = seg->head; b != nullptr; b = b->next) {
    if (b->ptr == ptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s(%p): double free, the block is already free", what, ptr));
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s(%p): not the start of a live allocation (a pointer into a block, or "
      "a double free of a block since merged with its neighbour)",
      what, ptr));
}

}  // namespace stepjit::runtime::cuda
