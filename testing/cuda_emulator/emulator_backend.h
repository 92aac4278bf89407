// The host emulator implementation of the CUDA Backend: device memory is
// host memory, every stream is an in-order queue run by its own thread,
// kernels are the generated CUDA C compiled as host C++
// (testing/cuda_emulator/host_emulation.h), GEMMs run on the CPU GEMM, and
// graphs are recorded lists of queued work. It lets everything above the
// backend run in tests on a machine without a GPU, and checks what a GPU would
// only crash on: copies are checked against the pointers' provenance.
//
// Streams follow CUDA's legacy default stream: work queued on stream 0 waits
// for the work already queued on every other stream, and work queued on
// another stream waits for the work already queued on stream 0 (streams are
// "blocking" streams, as cudaStreamCreate makes them). Stream 0 may be
// captured into a graph, which real CUDA refuses for the legacy stream.
// While a thread captures, it may allocate (the driver backend does so in
// relaxed capture mode) but not free, synchronize, or query or wait on an
// event, as the driver refuses in thread-local capture mode.
//
// An error raised by queued work (a kernel that deadlocks, a GEMM with bad
// arguments) is reported, once, by the next synchronizing call, as CUDA
// reports a kernel's faults.
#ifndef STEPJIT_TESTING_CUDA_EMULATOR_EMULATOR_BACKEND_H_
#define STEPJIT_TESTING_CUDA_EMULATOR_EMULATOR_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "devices/cuda/backend.h"

namespace stepjit::runtime::cuda {

struct EmulatorOptions {
  // DeviceAlloc fails with ResourceExhausted once the live device
  // allocations would exceed this, so out-of-memory handling can be tested.
  size_t memory_limit_bytes = std::numeric_limits<size_t>::max();
  // Limits().max_grid: launches use at most this many blocks, so the
  // grid-stride loops of generated kernels wrap.
  int64_t max_grid = 4;
  // Limits().preferred_block.
  int preferred_block = 64;
  // For tests of compile-failure handling: LoadSource of a module whose name
  // starts with this (when not empty) fails as a compile error would.
  std::string fail_loads_with_prefix;
};

// Work the emulator has run (counted when it ran, graph replays included).
struct EmulatorStats {
  int64_t launches = 0;        // kernel launches
  int64_t graph_launches = 0;  // LaunchGraph calls
  int64_t copies = 0;
  int64_t bytes_copied = 0;
  int64_t memsets = 0;
  int64_t gemms = 0;
};

std::unique_ptr<Backend> MakeEmulatorBackend(EmulatorOptions options = {});

// The counters of a backend MakeEmulatorBackend made (an internal check
// fails for any other). Queued work that has not run yet is not counted.
EmulatorStats GetEmulatorStats(const Backend& backend);
// True for a backend MakeEmulatorBackend made.
bool IsEmulatorBackend(const Backend& backend);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_TESTING_CUDA_EMULATOR_EMULATOR_BACKEND_H_
