#include "devices/cpu/device_runtime.h"

#include <array>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cpu/kernels.h"
#include "dist/dist_internal.h"
#include "ir/status.h"
#include "runtime/storage.h"

namespace stepjit::runtime::cpu {
namespace {

constexpr int64_t kAlignment = 64;

int64_t Rounded(int64_t nbytes) {
  const int64_t rounded = ((nbytes + kAlignment - 1) / kAlignment) * kAlignment;
  return rounded == 0 ? kAlignment : rounded;
}

// Large blocks freed by tensors, kept for the next allocation of the same
// rounded size. A training step allocates the same sizes every step; glibc
// hands blocks this large back to the kernel (mmap'd, or trimmed off the
// heap top), so without the cache every step page-faults and zeroes its
// activations afresh (~10% of a GPT step). Blocks under kMinBytes come from
// malloc's own bins; at most kMaxBytes stay cached, and a failed allocation
// empties the cache and retries before giving up.
class BlockCache {
 public:
  static constexpr int64_t kMinBytes = int64_t{256} << 10;
#if defined(__SANITIZE_ADDRESS__)
  // Under AddressSanitizer every block goes back to malloc, which then
  // catches a use after free.
  static constexpr int64_t kMaxBytes = 0;
#else
  static constexpr int64_t kMaxBytes = int64_t{1} << 30;
#endif

  // Sizes from kMinBytes up round to 1/16 of their power of two, so that
  // blocks of nearby sizes are shared.
  static int64_t SizeClass(int64_t bytes) {
    if (bytes < kMinBytes) return bytes;
    int64_t step = kMinBytes / 16;
    while (step * 16 * 2 <= bytes) step *= 2;
    return (bytes + step - 1) / step * step;
  }

  void* Take(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(bytes);
    if (it == free_.end()) return nullptr;
    void* p = it->second;
    free_.erase(it);
    cached_ -= bytes;
    return p;
  }
  // False: not kept (too small, or the cache is full); the caller frees it.
  bool Put(void* p, int64_t bytes) {
    if (bytes < kMinBytes || bytes > kMaxBytes) return false;
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + bytes > kMaxBytes) return false;
    free_.emplace(bytes, p);
    cached_ += bytes;
    return true;
  }
  void Clear() {
    std::multimap<int64_t, void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks.swap(free_);
      cached_ = 0;
    }
    for (auto& [bytes, p] : blocks) std::free(p);
  }
  int64_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }

 private:
  std::mutex mu_;
  std::multimap<int64_t, void*> free_;  // by size class
  int64_t cached_ = 0;
};

BlockCache& Cache() {
  static BlockCache* cache = new BlockCache;  // outlives static tensors
  return *cache;
}

// Blocks of up to kMaxBytes (0-d tensors: the scalars an optimizer or a
// loss wraps, many per step), kept per thread by size class (64, 128, 192,
// 256 bytes) so that they cost neither a lock nor aligned_alloc. A block
// freed on another thread joins that thread's lists; each list holds at
// most kPerClass blocks, the rest go back to malloc.
class SmallBlocks {
 public:
#if defined(__SANITIZE_ADDRESS__)
  static constexpr int64_t kMaxBytes = 0;  // every block back to malloc
#else
  static constexpr int64_t kMaxBytes = 4 * kAlignment;
#endif
  static constexpr size_t kPerClass = 256;

  ~SmallBlocks() {
    gone_ = true;  // a later release on this thread (static tensors) frees
    for (auto& list : free_) {
      for (void* p : list) std::free(p);
      list.clear();
    }
  }
  void* Take(int64_t bytes) {
    if (gone_) return nullptr;
    std::vector<void*>& list = free_[Class(bytes)];
    if (list.empty()) return nullptr;
    void* p = list.back();
    list.pop_back();
    return p;
  }
  bool Put(void* p, int64_t bytes) {
    if (gone_) return false;
    std::vector<void*>& list = free_[Class(bytes)];
    if (list.size() >= kPerClass) return false;
    list.push_back(p);
    return true;
  }

 private:
  static size_t Class(int64_t bytes) {
    return static_cast<size_t>(bytes / kAlignment - 1);
  }
  std::array<std::vector<void*>, 4> free_;
  // Trivially destructible, so still readable after the destructor ran.
  static thread_local bool gone_;
};
thread_local bool SmallBlocks::gone_ = false;

SmallBlocks& Small() {
  thread_local SmallBlocks blocks;
  return blocks;
}

void* Allocate(int64_t nbytes, Device) {
  const int64_t bytes = BlockCache::SizeClass(Rounded(nbytes));
  if (bytes <= SmallBlocks::kMaxBytes) {
    void* p = Small().Take(bytes);
    if (p == nullptr)
      p = std::aligned_alloc(kAlignment, static_cast<size_t>(bytes));
    if (p == nullptr)
      throw Error(absl::StrCat("out of host memory: cannot allocate ", nbytes,
                               " bytes for a tensor"));
    CountHostBytes(nbytes);
    return p;
  }
  void* p = bytes < BlockCache::kMinBytes ? nullptr : Cache().Take(bytes);
  if (p == nullptr)
    p = std::aligned_alloc(kAlignment, static_cast<size_t>(bytes));
  if (p == nullptr) {
    Cache().Clear();
    p = std::aligned_alloc(kAlignment, static_cast<size_t>(bytes));
  }
  if (p == nullptr) {
    throw Error(absl::StrCat(
        "out of host memory: cannot allocate ", nbytes, " bytes (",
        static_cast<double>(nbytes) / (1 << 30), " GiB) for a tensor"));
  }
  CountHostBytes(nbytes);
  return p;
}

void Release(void* data, int64_t nbytes, Device) {
  const int64_t bytes = BlockCache::SizeClass(Rounded(nbytes));
  const bool kept = bytes <= SmallBlocks::kMaxBytes ? Small().Put(data, bytes)
                                                    : Cache().Put(data, bytes);
  if (!kept) std::free(data);
  CountHostBytes(-nbytes);
}

}  // namespace

int64_t CachedHostBytes() { return Cache().cached_bytes(); }
void ReleaseCachedHostMemory() { Cache().Clear(); }

namespace {

DeviceRuntime Make() {
  DeviceRuntime rt;
  rt.name = "cpu";
  KernelTable table = {};
  RegisterElementwiseKernels(table);
  RegisterReductionKernels(table);
  RegisterNnKernels(table);
  RegisterConvKernels(table);
  RegisterMatmulKernels(table);
  RegisterMiscKernels(table);
  RegisterSamplingKernels(table);
  for (ir::OpId op : {ir::OpId::kAllReduce, ir::OpId::kBroadcast,
                      ir::OpId::kAllGather, ir::OpId::kBarrier}) {
    table[static_cast<int>(op)] = &dist::internal::RunHostCollective;
  }
  for (int i = 0; i < ir::kNumOps; ++i) rt.kernels[i] = table[i];
  rt.copy_into = &CopyInto;
  rt.allocate = &Allocate;
  rt.release = &Release;
  return rt;
}

}  // namespace

const DeviceRuntime& Runtime() {
  static const DeviceRuntime rt = Make();
  return rt;
}

}  // namespace stepjit::runtime::cpu
