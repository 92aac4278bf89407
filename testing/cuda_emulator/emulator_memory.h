// The host emulator's memory: host allocations by start address, checked.
#ifndef STEPJIT_TESTING_CUDA_EMULATOR_EMULATOR_MEMORY_H_
#define STEPJIT_TESTING_CUDA_EMULATOR_EMULATOR_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace stepjit::runtime::cuda {

// The device and pinned host allocations of the host emulator, so that the
// pointers a call is given can be checked against their provenance where a
// GPU would only fault. Not synchronized: the backend guards it.
class EmulatorMemory {
 public:
  struct Allocation {
    size_t bytes = 0;
    bool pinned = false;
  };

  EmulatorMemory() = default;
  ~EmulatorMemory();  // frees what is still allocated
  EmulatorMemory(const EmulatorMemory&) = delete;
  EmulatorMemory& operator=(const EmulatorMemory&) = delete;

  // `bytes` (> 0) of 64-byte aligned host memory to Add, or null.
  static void* AllocateHost(size_t bytes);
  // Records `p`, from AllocateHost, as device or pinned host memory.
  void Add(void* p, size_t bytes, bool pinned);
  // InvalidArgument for `call` unless `ptr` starts a live allocation of this
  // kind.
  absl::Status CheckStart(void* ptr, bool pinned, absl::string_view call) const;
  // Forgets and frees the allocation starting at `ptr` (pinned or not as
  // CheckStart found it); InvalidArgument when it was freed meanwhile.
  absl::Status Release(void* ptr, bool pinned, absl::string_view call);
  // Bytes of the live device allocations.
  size_t device_bytes() const { return device_bytes_; }

  // The allocation holding [p, p + bytes), or null.
  const Allocation* Holding(const void* p, size_t bytes) const;
  // InvalidArgument for `call`, naming the pointer `what`, unless
  // [p, p + bytes) lies in one device allocation (CheckDevice), or `p` is not
  // device memory (CheckHost).
  absl::Status CheckDevice(const void* p, size_t bytes, absl::string_view call,
                           absl::string_view what) const;
  absl::Status CheckHost(const void* p, absl::string_view call,
                         absl::string_view what) const;

 private:
  std::map<uintptr_t, Allocation> allocations_;  // by start address
  size_t device_bytes_ = 0;
};

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_TESTING_CUDA_EMULATOR_EMULATOR_MEMORY_H_
