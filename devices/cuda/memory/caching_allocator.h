// A stream-aware caching allocator for device memory in the style of
// PyTorch's CUDACachingAllocator, written against an abstract raw-memory
// backend so that everything except the driver calls is testable on a CPU.
//
// Requests are rounded to 512 bytes. Requests of at most 1 MiB come from a
// small pool of 2 MiB segments; larger ones from a large pool whose segments
// are the request rounded up to 2 MiB. A cached block is split when the rest
// is worth keeping (>= 512 bytes in the small pool, > 1 MiB in the large one)
// and freed blocks merge with free neighbours of their segment, so segments
// can go back to the backend whole.
//
// Streams: a block belongs to the stream it was allocated on. Once freed, that
// stream reuses it at once (stream order makes it safe). Another stream gets
// it only after an event recorded on the owner stream after the free has
// completed; the allocator records such an event, one per stream at a time,
// when another stream first finds nothing of its own. A block that
// RecordStream marked as used on other streams is not reusable by anyone
// until events recorded on those streams at Free have completed.
#ifndef STEPJIT_DEVICES_CUDA_MEMORY_CACHING_ALLOCATOR_H_
#define STEPJIT_DEVICES_CUDA_MEMORY_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stepjit::runtime::cuda {

// An opaque stream handle (a CUstream); 0 is the default stream.
using Stream = uintptr_t;
// An opaque event handle owned by the backend.
using Event = uintptr_t;

// Raw device memory and stream-completion events. Calls are made with the
// allocator's lock held, so an implementation need not be thread-safe for
// one allocator.
class DeviceMemoryBackend {
 public:
  virtual ~DeviceMemoryBackend() = default;
  // ResourceExhausted means out of memory (the allocator then flushes its
  // cache and retries once); any other error is passed to the caller.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // May be called while queued work still uses `ptr` (cuMemFree synchronizes).
  virtual absl::Status Free(void* ptr) = 0;
  // An event that completes when all work queued on `stream` so far is done.
  virtual absl::StatusOr<Event> RecordEvent(Stream stream) = 0;
  // True once the event has completed.
  virtual absl::StatusOr<bool> QueryEvent(Event event) = 0;
  virtual void DestroyEvent(Event event) = 0;
};

struct MemoryStats {
  size_t allocated_bytes = 0;  // in live blocks (rounded sizes)
  size_t reserved_bytes = 0;   // in segments held from the backend
  size_t peak_allocated_bytes = 0;
  size_t peak_reserved_bytes = 0;
  int64_t num_allocs = 0;      // successful Allocate calls
  int64_t num_frees = 0;       // successful Free calls
  int64_t num_cache_hits = 0;  // Allocate calls served without the backend
  int64_t num_ooms = 0;        // Allocate calls that failed for memory
};

class CachingAllocator {
 public:
  static constexpr size_t kMinBlockSize = 512;
  static constexpr size_t kSmallSize = size_t{1} << 20;
  static constexpr size_t kSmallBuffer = size_t{2} << 20;
  static constexpr size_t kLargeRounding = size_t{2} << 20;

  struct Options {
    // Most bytes the allocator may reserve, like PyTorch's memory fraction;
    // crossing it is handled as the backend running out of memory.
    size_t limit_bytes = std::numeric_limits<size_t>::max();
  };

  explicit CachingAllocator(std::unique_ptr<DeviceMemoryBackend> backend)
      : CachingAllocator(std::move(backend), Options()) {}
  CachingAllocator(std::unique_ptr<DeviceMemoryBackend> backend,
                   Options options);
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  // Returns every segment to the backend, live blocks included.
  ~CachingAllocator();

  // `bytes` rounded up to the block granularity (0 takes one granule).
  static size_t RoundSize(size_t bytes);
  // The segment size the backend is asked for to serve `bytes`.
  static size_t SegmentSize(size_t bytes);

  absl::StatusOr<void*> Allocate(size_t bytes, Stream stream = 0);
  // InvalidArgument for a pointer this allocator did not return or one
  // already freed; the allocator's state is unchanged then.
  absl::Status Free(void* ptr);
  // Marks `ptr` as used by work on `stream`, so that its memory is not
  // reused until that work is done.
  absl::Status RecordStream(void* ptr, Stream stream);
  // Returns every segment with no live or pending block to the backend.
  absl::Status EmptyCache();

  MemoryStats memory_stats() const;
  void ResetPeakStats();

 private:
  struct Segment;
  enum class State { kAllocated, kFree, kPending };
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    Stream stream = 0;
    State state = State::kFree;
    // Frees are numbered; a free block is idle (safe for any stream) once an
    // event recorded on its stream after free_seq has completed.
    uint64_t free_seq = 0;
    Segment* segment = nullptr;
    Block* prev = nullptr;  // neighbours within the segment
    Block* next = nullptr;
    std::vector<Stream> stream_uses;  // other streams, via RecordStream
    std::vector<Event> use_events;    // recorded at Free for stream_uses
  };
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;
  struct Segment {
    char* base = nullptr;
    size_t size = 0;
    Pool* pool = nullptr;
    Block* head = nullptr;
  };
  // Per stream: the newest free sequence number known complete, and the
  // one event in flight that will extend it.
  struct StreamSync {
    uint64_t completed_seq = 0;
    bool in_flight = false;
    Event event = 0;
    uint64_t event_seq = 0;
  };

  absl::Status ProcessEvents();
  bool IsIdle(const Block* b) const;
  Block* FindOwn(Pool& pool, Stream stream, size_t size);
  Block* FindIdleOther(Pool& pool, Stream stream, size_t size);
  absl::StatusOr<Block*> NewSegment(Pool& pool, size_t rounded, Stream stream,
                                    size_t requested);
  absl::StatusOr<char*> BackendAllocate(size_t bytes);
  // Cuts b down to `size`, returning the rest to the pool when worth it.
  void Split(Block* b, size_t size, bool small);
  void ReturnToPool(Block* b);
  absl::Status ReleaseCachedSegments();
  Segment* SegmentOf(const void* ptr) const;
  absl::Status CheckLive(void* ptr, const char* what) const;

  std::unique_ptr<DeviceMemoryBackend> backend_;
  const Options options_;
  mutable std::mutex mu_;
  Pool small_pool_;
  Pool large_pool_;
  std::map<uintptr_t, std::unique_ptr<Segment>> segments_;  // by base
  absl::flat_hash_map<void*, Block*> live_;
  std::vector<Block*> pending_;  // freed, waiting on use_events
  absl::flat_hash_map<Stream, StreamSync> sync_;
  uint64_t free_seq_ = 0;
  MemoryStats stats_;
};

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_MEMORY_CACHING_ALLOCATOR_H_
