// The CUDA caching allocator against a malloc backend with a capacity and
// hand-completed events, and against the driver where there is a GPU.
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "devices/cuda/backend.h"
#include "devices/cuda/driver/device.h"
#include "devices/cuda/driver/driver_backend.h"
#include "devices/cuda/memory/caching_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stepjit::runtime::cuda {
namespace {

using ::testing::HasSubstr;

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

// Host memory standing in for a device: Allocate fails past `capacity`, and
// events complete when the test says (or at once with auto_complete).
class HostBackend : public DeviceMemoryBackend {
 public:
  explicit HostBackend(size_t capacity = ~size_t{0}, bool auto_complete = true)
      : capacity_(capacity), auto_complete_(auto_complete) {}
  ~HostBackend() override {
    for (auto& [p, bytes] : sizes_) std::free(p);
  }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes > capacity_ - used_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "host backend capacity ", capacity_, " bytes, ", used_, " in use"));
    }
    void* p = std::malloc(bytes);
    sizes_[p] = bytes;
    used_ += bytes;
    ++allocs_;
    return p;
  }
  absl::Status Free(void* ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(ptr);
    if (it == sizes_.end()) return absl::InternalError("backend: bad free");
    used_ -= it->second;
    sizes_.erase(it);
    std::free(ptr);
    ++frees_;
    return absl::OkStatus();
  }
  absl::StatusOr<Event> RecordEvent(Stream stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_[++recorded_] = {stream, auto_complete_};
    return recorded_;
  }
  absl::StatusOr<bool> QueryEvent(Event event) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = events_.find(event);
    if (it == events_.end()) return absl::InternalError("backend: bad event");
    return it->second.second;
  }
  void DestroyEvent(Event event) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.erase(event);
  }

  // Completes the events recorded so far on `stream`.
  void Complete(Stream stream) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, ev] : events_) {
      if (ev.first == stream) ev.second = true;
    }
  }
  void CompleteAll() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, ev] : events_) ev.second = true;
  }

  int64_t allocs() const { return Locked(allocs_); }
  int64_t frees() const { return Locked(frees_); }
  size_t used() const { return Locked(used_); }
  size_t live_segments() const { return Locked(sizes_.size()); }
  int64_t events_recorded() const { return Locked(int64_t(recorded_)); }
  size_t live_events() const { return Locked(events_.size()); }

 private:
  template <typename T>
  T Locked(const T& v) const {
    std::lock_guard<std::mutex> lock(mu_);
    return v;
  }

  mutable std::mutex mu_;
  const size_t capacity_;
  const bool auto_complete_;
  size_t used_ = 0;
  int64_t allocs_ = 0, frees_ = 0;
  Event recorded_ = 0;
  absl::flat_hash_map<void*, size_t> sizes_;
  absl::flat_hash_map<Event, std::pair<Stream, bool>> events_;
};

// An allocator and a view of its backend.
struct Fixture {
  explicit Fixture(size_t capacity = ~size_t{0}, bool auto_complete = true,
                   CachingAllocator::Options options = {})
      : backend(new HostBackend(capacity, auto_complete)),
        allocator(std::unique_ptr<DeviceMemoryBackend>(backend), options) {}
  HostBackend* backend;  // owned by allocator
  CachingAllocator allocator;

  void* Alloc(size_t bytes, Stream stream = 0) {
    absl::StatusOr<void*> p = allocator.Allocate(bytes, stream);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.value_or(nullptr);
  }
};

char* At(void* p, size_t offset) { return static_cast<char*>(p) + offset; }

TEST(CachingAllocatorTest, RoundsSizesAndChoosesPools) {
  EXPECT_EQ(CachingAllocator::RoundSize(0), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(512), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::SegmentSize(1), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSize(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSize(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSize(5 * kMiB), 6 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSize(6 * kMiB), 6 * kMiB);

  Fixture f;
  void* small = f.Alloc(1000);
  EXPECT_EQ(f.backend->used(), 2 * kMiB);
  EXPECT_EQ(f.allocator.memory_stats().allocated_bytes, 1024u);
  // A large request never shares the small pool's segment.
  void* large = f.Alloc(3 * kMiB);
  EXPECT_EQ(f.backend->allocs(), 2);
  EXPECT_EQ(f.backend->used(), 6 * kMiB);
  ASSERT_TRUE(f.allocator.Free(large).ok());
  // Nor does a small request take the cached large block.
  void* small2 = f.Alloc(kMiB);
  EXPECT_EQ(small2, At(small, 1024));
  void* small3 = f.Alloc(kMiB);
  EXPECT_EQ(f.backend->allocs(), 3);
  EXPECT_EQ(f.backend->used(), 8 * kMiB);
  for (void* p : {small, small2, small3}) EXPECT_TRUE(f.allocator.Free(p).ok());
}

TEST(CachingAllocatorTest, LargeBlocksSplitOnlyWhenTheRestIsOverOneMiB) {
  Fixture f;
  // 5 MiB takes a 6 MiB segment; the 1 MiB rest stays in the block.
  void* a = f.Alloc(5 * kMiB);
  EXPECT_EQ(f.allocator.memory_stats().allocated_bytes, 6 * kMiB);
  ASSERT_TRUE(f.allocator.Free(a).ok());
  // With 6 and 8 MiB cached, 4 MiB takes the best fit (6 MiB) and cuts off
  // 2 MiB, which then serves 2 MiB: no backend call for either.
  void* b = f.Alloc(8 * kMiB);
  ASSERT_TRUE(f.allocator.Free(b).ok());
  void* c = f.Alloc(4 * kMiB);
  void* d = f.Alloc(2 * kMiB);
  EXPECT_EQ(c, a);
  EXPECT_EQ(d, At(a, 4 * kMiB));
  EXPECT_EQ(f.backend->allocs(), 2);
  EXPECT_EQ(f.allocator.memory_stats().num_cache_hits, 2);
  EXPECT_EQ(f.allocator.memory_stats().allocated_bytes, 6 * kMiB);
}

TEST(CachingAllocatorTest, ReusesAFreedBlockWithoutTheBackend) {
  Fixture f;
  void* a = f.Alloc(4096);
  ASSERT_TRUE(f.allocator.Free(a).ok());
  void* b = f.Alloc(4000);
  EXPECT_EQ(b, a);
  EXPECT_EQ(f.backend->allocs(), 1);
  EXPECT_EQ(f.allocator.memory_stats().num_cache_hits, 1);
  EXPECT_EQ(f.allocator.memory_stats().num_allocs, 2);
}

TEST(CachingAllocatorTest, SplitsAndCoalescesFreeNeighbours) {
  Fixture f;
  void* a = f.Alloc(1 * kKiB);
  void* b = f.Alloc(2 * kKiB);
  void* c = f.Alloc(4 * kKiB);
  EXPECT_EQ(b, At(a, 1 * kKiB));
  EXPECT_EQ(c, At(a, 3 * kKiB));
  ASSERT_TRUE(f.allocator.Free(b).ok());
  ASSERT_TRUE(f.allocator.Free(a).ok());
  // A and B merged: a 3 KiB block at A, the best fit for 3 KiB.
  void* ab = f.Alloc(3 * kKiB);
  EXPECT_EQ(ab, a);
  EXPECT_EQ(f.backend->allocs(), 1);
  ASSERT_TRUE(f.allocator.Free(ab).ok());
  ASSERT_TRUE(f.allocator.Free(c).ok());
  // The whole 2 MiB segment is one block again: two 1 MiB requests fit.
  void* x = f.Alloc(kMiB);
  void* y = f.Alloc(kMiB);
  EXPECT_EQ(x, a);
  EXPECT_EQ(y, At(a, kMiB));
  EXPECT_EQ(f.backend->allocs(), 1);
}

TEST(CachingAllocatorTest, SameStreamReusesAtOnce) {
  Fixture f(~size_t{0}, /*auto_complete=*/false);
  void* p = f.Alloc(8 * kMiB, 1);
  ASSERT_TRUE(f.allocator.Free(p).ok());
  EXPECT_EQ(f.Alloc(8 * kMiB, 1), p);
  EXPECT_EQ(f.backend->events_recorded(), 0);
}

TEST(CachingAllocatorTest, OtherStreamWaitsForTheOwnersEvent) {
  Fixture f(~size_t{0}, /*auto_complete=*/false);
  void* p = f.Alloc(8 * kMiB, 1);
  ASSERT_TRUE(f.allocator.Free(p).ok());
  // Stream 1 may still be using p: stream 2 gets fresh memory, and an event
  // goes on stream 1.
  void* q = f.Alloc(8 * kMiB, 2);
  EXPECT_NE(q, p);
  EXPECT_EQ(f.backend->allocs(), 2);
  EXPECT_EQ(f.backend->events_recorded(), 1);
  void* r = f.Alloc(8 * kMiB, 2);
  EXPECT_NE(r, p);
  EXPECT_EQ(f.backend->allocs(), 3);
  EXPECT_EQ(f.backend->events_recorded(), 1);  // one in flight per stream
  f.backend->Complete(1);
  EXPECT_EQ(f.Alloc(8 * kMiB, 2), p);
  EXPECT_EQ(f.backend->allocs(), 3);
  EXPECT_EQ(f.backend->live_events(), 0u);
}

TEST(CachingAllocatorTest, RecordStreamHoldsTheBlockUntilThoseStreamsFinish) {
  Fixture f(~size_t{0}, /*auto_complete=*/false);
  void* p = f.Alloc(8 * kMiB, 1);
  ASSERT_TRUE(f.allocator.RecordStream(p, 1).ok());  // the owner: no event
  ASSERT_TRUE(f.allocator.RecordStream(p, 2).ok());
  ASSERT_TRUE(f.allocator.RecordStream(p, 2).ok());
  ASSERT_TRUE(f.allocator.Free(p).ok());
  EXPECT_EQ(f.backend->events_recorded(), 1);
  // Not even the owner stream may reuse it while stream 2 works on it.
  void* q = f.Alloc(8 * kMiB, 1);
  EXPECT_NE(q, p);
  ASSERT_TRUE(f.allocator.EmptyCache().ok());
  EXPECT_EQ(f.backend->live_segments(), 2u);  // pending blocks stay
  f.backend->Complete(2);
  EXPECT_EQ(f.Alloc(8 * kMiB, 1), p);
  EXPECT_EQ(f.backend->allocs(), 2);

  absl::Status st = f.allocator.RecordStream(At(p, 1024), 2);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
}

TEST(CachingAllocatorTest, OutOfMemoryFlushesTheCacheAndRetriesOnce) {
  Fixture f(10 * kMiB);
  void* a = f.Alloc(4 * kMiB);
  void* b = f.Alloc(4 * kMiB);
  ASSERT_TRUE(f.allocator.Free(a).ok());
  // 8 + 6 MiB is over capacity: a's cached segment goes back, then it fits.
  void* c = f.Alloc(6 * kMiB);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(f.backend->frees(), 1);
  EXPECT_EQ(f.backend->used(), 10 * kMiB);
  EXPECT_EQ(f.allocator.memory_stats().num_ooms, 0);

  absl::StatusOr<void*> d = f.allocator.Allocate(1000);
  ASSERT_TRUE(absl::IsResourceExhausted(d.status())) << d.status();
  const std::string msg(d.status().message());
  EXPECT_THAT(msg, HasSubstr("cannot allocate 1000 bytes"));
  EXPECT_THAT(msg, HasSubstr("10485760 bytes allocated"));
  EXPECT_THAT(msg, HasSubstr("10485760 bytes reserved"));
  EXPECT_THAT(msg, HasSubstr("limit none"));
  EXPECT_THAT(msg, HasSubstr("host backend capacity 10485760 bytes"));
  EXPECT_EQ(f.allocator.memory_stats().num_ooms, 1);
  EXPECT_EQ(f.allocator.memory_stats().num_allocs, 3);
  for (void* p : {b, c}) EXPECT_TRUE(f.allocator.Free(p).ok());
}

TEST(CachingAllocatorTest, TheAllocatorsOwnLimitIsNamed) {
  CachingAllocator::Options options;
  options.limit_bytes = 8 * kMiB;
  Fixture f(~size_t{0}, true, options);
  void* a = f.Alloc(6 * kMiB);
  absl::StatusOr<void*> b = f.allocator.Allocate(3 * kMiB);
  ASSERT_TRUE(absl::IsResourceExhausted(b.status())) << b.status();
  EXPECT_THAT(b.status().message(), HasSubstr("limit 8388608 bytes"));
  EXPECT_THAT(b.status().message(), HasSubstr("6291456 bytes reserved"));
  EXPECT_EQ(f.backend->allocs(), 1);
  EXPECT_TRUE(f.allocator.Free(a).ok());
}

TEST(CachingAllocatorTest, EmptyCacheReturnsOnlyUnusedSegments) {
  Fixture f;
  void* small = f.Alloc(4096);
  void* small_kept = f.Alloc(4096);
  void* large = f.Alloc(8 * kMiB);
  // Never-used memory is safe for any stream: stream 3 takes the rest of
  // stream 0's small segment.
  void* other = f.Alloc(1000, 3);
  EXPECT_EQ(other, At(small, 8192));
  ASSERT_EQ(f.backend->live_segments(), 2u);
  for (void* p : {small, large, other}) ASSERT_TRUE(f.allocator.Free(p).ok());
  ASSERT_TRUE(f.allocator.EmptyCache().ok());
  EXPECT_EQ(f.backend->live_segments(), 1u);  // small_kept's segment
  EXPECT_EQ(f.allocator.memory_stats().reserved_bytes, 2 * kMiB);
  ASSERT_TRUE(f.allocator.Free(small_kept).ok());
  ASSERT_TRUE(f.allocator.EmptyCache().ok());
  EXPECT_EQ(f.backend->live_segments(), 0u);
  EXPECT_EQ(f.backend->used(), 0u);
}

TEST(CachingAllocatorTest, StatsAndPeaks) {
  Fixture f;
  void* a = f.Alloc(1000);      // 1024 in a new 2 MiB segment
  void* b = f.Alloc(5 * kMiB);  // 6 MiB block in a new 6 MiB segment
  ASSERT_TRUE(f.allocator.Free(b).ok());
  void* c = f.Alloc(3000);  // 3072, a cache hit
  MemoryStats s = f.allocator.memory_stats();
  EXPECT_EQ(s.allocated_bytes, 1024u + 3072u);
  EXPECT_EQ(s.reserved_bytes, 8 * kMiB);
  EXPECT_EQ(s.peak_allocated_bytes, 1024u + 6 * kMiB);
  EXPECT_EQ(s.peak_reserved_bytes, 8 * kMiB);
  EXPECT_EQ(s.num_allocs, 3);
  EXPECT_EQ(s.num_frees, 1);
  EXPECT_EQ(s.num_cache_hits, 1);
  EXPECT_EQ(s.num_ooms, 0);

  f.allocator.ResetPeakStats();
  ASSERT_TRUE(f.allocator.EmptyCache().ok());
  s = f.allocator.memory_stats();
  EXPECT_EQ(s.peak_allocated_bytes, 4096u);
  EXPECT_EQ(s.peak_reserved_bytes, 8 * kMiB);
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB);
  ASSERT_TRUE(f.allocator.Free(a).ok());
  ASSERT_TRUE(f.allocator.Free(c).ok());
  s = f.allocator.memory_stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.peak_allocated_bytes, 4096u);
  EXPECT_EQ(s.num_frees, 3);
}

TEST(CachingAllocatorTest, BadFreesAreErrorsNotCrashes) {
  Fixture f;
  void* p = f.Alloc(4096);
  void* q = f.Alloc(4096);
  ASSERT_TRUE(f.allocator.Free(p).ok());
  absl::Status twice = f.allocator.Free(p);
  EXPECT_TRUE(absl::IsInvalidArgument(twice));
  EXPECT_THAT(twice.message(), HasSubstr("double free"));
  int local = 0;
  absl::Status unknown = f.allocator.Free(&local);
  EXPECT_TRUE(absl::IsInvalidArgument(unknown));
  EXPECT_THAT(unknown.message(), HasSubstr("unknown pointer"));
  absl::Status inside = f.allocator.Free(At(q, 512));
  EXPECT_TRUE(absl::IsInvalidArgument(inside));
  EXPECT_THAT(inside.message(),
              HasSubstr("not the start of a live allocation"));
  EXPECT_TRUE(absl::IsInvalidArgument(f.allocator.Free(nullptr)));
  MemoryStats s = f.allocator.memory_stats();
  EXPECT_EQ(s.num_frees, 1);
  EXPECT_EQ(s.allocated_bytes, 4096u);
  EXPECT_TRUE(f.allocator.Free(q).ok());
}

TEST(CachingAllocatorTest, ManyThreadsLeaveNothingBehind) {
  Fixture f;
  constexpr int kThreads = 4, kOps = 2000;
  auto work = [&](int t) {
    std::mt19937 rng(1234 + t);
    const Stream stream = t + 1;
    std::vector<std::pair<char*, size_t>> live;
    for (int i = 0; i < kOps; ++i) {
      if (live.empty() || rng() % 100 < 55) {
        const size_t bytes =
            rng() % 10 == 0 ? 1 + rng() % (6 * kMiB) : 1 + rng() % (64 * kKiB);
        absl::StatusOr<void*> p = f.allocator.Allocate(bytes, stream);
        ASSERT_TRUE(p.ok()) << p.status();
        auto* c = static_cast<char*>(*p);
        // Tag both ends: an overlap with another live block would show.
        c[0] = c[bytes - 1] = static_cast<char>(t);
        if (rng() % 8 == 0) {
          ASSERT_TRUE(f.allocator.RecordStream(c, 1 + (t + 1) % kThreads).ok());
        }
        live.emplace_back(c, bytes);
      } else {
        const size_t k = rng() % live.size();
        auto [c, bytes] = live[k];
        ASSERT_EQ(c[0], static_cast<char>(t));
        ASSERT_EQ(c[bytes - 1], static_cast<char>(t));
        ASSERT_TRUE(f.allocator.Free(c).ok());
        live[k] = live.back();
        live.pop_back();
      }
    }
    for (auto [c, bytes] : live) ASSERT_TRUE(f.allocator.Free(c).ok());
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t);
  for (std::thread& th : threads) th.join();

  MemoryStats s = f.allocator.memory_stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.num_allocs, s.num_frees);
  EXPECT_GT(s.num_cache_hits, 0);
  ASSERT_TRUE(f.allocator.EmptyCache().ok());
  EXPECT_EQ(f.allocator.memory_stats().reserved_bytes, 0u);
  EXPECT_EQ(f.backend->live_segments(), 0u);
  EXPECT_EQ(f.backend->used(), 0u);
  EXPECT_EQ(f.backend->live_events(), 0u);
}

TEST(CachingAllocatorDriverTest, CachesDeviceMemory) {
  if (!Availability().available) GTEST_SKIP() << Availability().reason;
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeDriverBackend();
  ASSERT_TRUE(backend.ok()) << backend.status();
  CachingAllocator allocator(MakeAllocatorBackend(backend->get()));
  absl::StatusOr<void*> p = allocator.Allocate(kMiB);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<char> in(kMiB), out(kMiB);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<char>(i * 7);
  const auto dev = static_cast<DevicePtr>(reinterpret_cast<uintptr_t>(*p));
  ASSERT_TRUE(CopyToDevice(dev, in.data(), in.size()).ok());
  ASSERT_TRUE(CopyToHost(out.data(), dev, out.size()).ok());
  EXPECT_EQ(in, out);
  ASSERT_TRUE(allocator.Free(*p).ok());
  absl::StatusOr<void*> q = allocator.Allocate(kMiB);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(*q, *p);
  EXPECT_EQ(allocator.memory_stats().num_cache_hits, 1);
  // Blocks move between streams through events on the driver's streams.
  absl::StatusOr<Stream> other = (*backend)->CreateStream();
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE(allocator.Free(*q).ok());
  ASSERT_TRUE((*backend)->SynchronizeDevice().ok());
  absl::StatusOr<void*> r = allocator.Allocate(kMiB, *other);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(allocator.Free(*r).ok());
  ASSERT_TRUE((*backend)->DestroyStream(*other).ok());
  q = allocator.Allocate(kMiB);
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<void*> huge = allocator.Allocate(size_t{1} << 44);
  EXPECT_TRUE(absl::IsResourceExhausted(huge.status())) << huge.status();
  ASSERT_TRUE(allocator.Free(*q).ok());
  ASSERT_TRUE(allocator.EmptyCache().ok());
  EXPECT_EQ(allocator.memory_stats().reserved_bytes, 0u);
}

}  // namespace
}  // namespace stepjit::runtime::cuda
