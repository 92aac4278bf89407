// PoolAllocator: an allocator for std::allocate_shared that keeps freed
// single objects per thread and size, so that the many short-lived tensor
// headers a step makes (TensorImpl and Storage with their control blocks:
// one pair per op, every call while a compiled step checks its record) are
// recycled without a trip through malloc. A block freed on another thread
// joins that thread's list; each list keeps at most kPerSize blocks.
#ifndef STEPJIT_RUNTIME_OBJECT_POOL_H_
#define STEPJIT_RUNTIME_OBJECT_POOL_H_

#include <cstddef>
#include <new>
#include <vector>

namespace stepjit::runtime {

template <size_t kSize, size_t kAlign>
class BlockList {
 public:
#if defined(__SANITIZE_ADDRESS__)
  static constexpr size_t kPerSize = 0;  // every block back to malloc
#else
  static constexpr size_t kPerSize = 4096;
#endif

  static void* Take() {
    BlockList& l = Get();
    if (gone_ || l.free_.empty())
      return ::operator new (kSize, std::align_val_t{kAlign});
    void* p = l.free_.back();
    l.free_.pop_back();
    return p;
  }
  static void Put(void* p) {
    BlockList& l = Get();
    if (gone_ || l.free_.size() >= kPerSize) {
      ::operator delete (p, std::align_val_t{kAlign});
      return;
    }
    l.free_.push_back(p);
  }

  ~BlockList() {
    gone_ = true;  // later frees on this thread (static tensors) go to malloc
    for (void* p : free_) ::operator delete (p, std::align_val_t{kAlign});
  }

 private:
  static BlockList& Get() {
    thread_local BlockList list;
    return list;
  }
  std::vector<void*> free_;
  // Trivially destructible, so still readable after the destructor ran.
  static thread_local bool gone_;
};
template <size_t kSize, size_t kAlign>
thread_local bool BlockList<kSize, kAlign>::gone_ = false;

template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {
  }  // NOLINT: rebinding converts implicitly

  T* allocate(size_t n) {
    if (n != 1)
      return static_cast<T*>(
          ::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
    return static_cast<T*>(BlockList<sizeof(T), alignof(T)>::Take());
  }
  void deallocate(T* p, size_t n) {
    if (n != 1) {
      ::operator delete (p, std::align_val_t{alignof(T)});
      return;
    }
    BlockList<sizeof(T), alignof(T)>::Put(p);
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_OBJECT_POOL_H_
