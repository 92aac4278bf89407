// Storage: a reference-counted buffer with a version counter: 64-byte aligned
// host memory (optionally page-locked), or device memory from the CUDA
// backend's caching allocator.
#ifndef STEPJIT_RUNTIME_STORAGE_H_
#define STEPJIT_RUNTIME_STORAGE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "runtime/device.h"

namespace stepjit {

namespace runtime {
class PendingWork;  // runtime/pending.h
}  // namespace runtime

// Where the dispatch observer that records a step (the tracer) keeps what it
// knows of a tensor or storage, so that looking a tensor up costs no hash
// and no lock: valid only while `epoch` is that recording's (each takes a
// new one), and used only by the thread that records. On a tensor: the
// record operand it holds and its storage's `writes` when it got it; on a
// storage: the in-place writes seen so far (a tensor bound before the last
// one holds a stale value).
struct ObserverSlot {
  uint64_t epoch = 0;
  int value = 0;
  uint32_t writes = 0;
  // A leaf's .grad as the tracer saw it, valid in recording `grad_epoch`:
  // bit 0, read or set; bit 1, set.
  uint64_t grad_epoch = 0;
  uint32_t grad_flags = 0;
};

class Storage {
 public:
  // Allocates `nbytes` (uninitialized) on `device`. `pinned` asks for
  // page-locked host memory (CPU only; needs a CUDA backend), so that copies
  // to and from a GPU can run asynchronously.
  Storage(int64_t nbytes, Device device, bool pinned = false);
  // A storage without memory for shape-only (meta) tensors: dispatch under
  // runtime::MetaModeGuard records ops on them and runs no kernel, and any
  // read of their data throws (Tensor::data_ptr).
  struct MetaTag {};
  Storage(MetaTag, int64_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  int64_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }
  bool is_meta() const { return meta_; }
  // Gives a meta storage memory of its own (uninitialized), in place, so
  // that every tensor on it becomes a real one: a shape-only run of a step
  // that kept a tensor it created hands the step a real tensor after all.
  void Materialize();
  // Exchanges the memory of two storages of the same size on the same
  // device (neither meta, pinned or with pending work): every tensor on
  // either now reads the other's bytes. A CUDA graph's output buffer, whose
  // address the graph holds, passes its last result on to the tensors that
  // still hold it this way (program/cuda/cuda_graph.cc).
  void SwapMemory(Storage& other);

  // Bumped by every in-place write; autograd checks it for saved tensors.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void BumpVersion() { version_.fetch_add(1, std::memory_order_relaxed); }

  mutable ObserverSlot observer;

  // The work still writing this storage (an async collective's result;
  // runtime/pending.h), which its first reader waits for. Set and taken on
  // the thread that issued the work.
  bool has_pending() const { return pending_ != nullptr; }
  const std::shared_ptr<runtime::PendingWork>& pending() const {
    return pending_;
  }
  void set_pending(std::shared_ptr<runtime::PendingWork> work) {
    pending_ = std::move(work);
  }
  std::shared_ptr<runtime::PendingWork> TakePending() {
    return std::move(pending_);
  }

 private:
  // (After `observer`, what a recording call reads of a storage first: one
  // cache line with the shared_ptr control block.)
  bool meta_ = false;
  bool pinned_ = false;
  Device device_;
  void* data_ = nullptr;
  std::shared_ptr<runtime::PendingWork> pending_;
  int64_t nbytes_ = 0;
  std::atomic<uint64_t> version_{0};
};

// Host memory accounting for tensor storage (bytes live now and the peak).
struct MemoryStats {
  int64_t allocated_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t num_allocs = 0;
};
MemoryStats GetCpuMemoryStats();
// Meta storages alive now (a shape-only re-trace must leave none behind).
int64_t LiveMetaStorages();
void ResetCpuPeakMemory();
// Adds `delta` bytes to the host accounting (a positive delta counts one
// allocation): the CPU runtime's allocations and pinned host memory.
void CountHostBytes(int64_t delta);

}  // namespace stepjit

#endif  // STEPJIT_RUNTIME_STORAGE_H_
