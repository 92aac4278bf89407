// What the CUDA runtime needs from a device, behind one interface: the
// dlopen'ed driver (plus NVRTC and cuBLASLt) on a machine with a GPU, or the
// host emulator (generated CUDA C compiled as host C++) that lets every layer
// above it - storage, eager ops, the executor's CUDA path, CUDA-graph replay -
// run in tests on a machine without one.
//
// Work is stream-ordered as in CUDA: copies, memsets, launches and GEMMs are
// queued on a stream and may return before they ran. Stream 0 is the default
// stream. While a stream is being captured (BeginCapture .. EndCapture), work
// queued on it is recorded into a graph instead of running, as in CUDA.
#ifndef STEPJIT_DEVICES_CUDA_BACKEND_H_
#define STEPJIT_DEVICES_CUDA_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "devices/cuda/memory/caching_allocator.h"
#include "ir/dtype.h"
#include "runtime/gemm_args.h"

namespace stepjit::runtime::cuda {

enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// A kernel inside a loaded module (a CUfunction, or a host entry point).
struct KernelHandle {
  void* fn = nullptr;
};

// A compiled and loaded translation unit; stays loaded while referenced.
class LoadedModule {
 public:
  virtual ~LoadedModule() = default;
  // NotFound naming the kernel when the module has no such extern "C" kernel.
  virtual absl::StatusOr<KernelHandle> Function(absl::string_view name) const = 0;
};

// An executable graph (a cudaGraphExec_t, or the emulator's recorded list).
using GraphHandle = uintptr_t;

// C[m,n] = act(op(A)[m,k] * op(B)[k,n] + bias[n]) on the device, row-major,
// with the CPU GEMM's argument conventions (runtime/gemm_args.h): batched
// with element strides, a stride of 0 broadcasting A or B. `dtype` is the
// type of A, B and C (f32, f64, f16, bf16; half types accumulate in f32);
// `bias` and `bias_grad` (the row sums of op(A), batch 1 only) have C's
// dtype. `allow_tf32` lets f32 products use TF32 tensor cores.
struct DeviceGemmArgs {
  GemmArgs gemm;  // gemm.backend is ignored
  bool allow_tf32 = false;
};

struct BackendLimits {
  int max_block = 1024;         // threads per block
  int64_t max_grid = 1 << 30;   // blocks per launch (grid-stride loops cover more)
  int preferred_block = 256;    // what generated kernels should be emitted with
};

class Backend {
 public:
  virtual ~Backend() = default;

  // For people: "NVIDIA H200 (sm_90), driver 13.0" or "host emulator".
  virtual std::string Describe() const = 0;
  // The architecture kernels are built for: "sm_90", or "host".
  virtual std::string Arch() const = 0;
  virtual int DeviceCount() const { return 1; }
  // The driver's ordinal of the device this backend runs on; -1 for the
  // host emulator. Libraries that use the device themselves (NCCL) need it.
  virtual int DeviceOrdinal() const { return -1; }
  // Makes the device's context current on the calling thread, for such
  // libraries (their CUDA runtime calls act on the current context).
  virtual absl::Status BindThread() { return absl::OkStatus(); }
  virtual BackendLimits Limits() const { return {}; }

  // Raw device memory (the caching allocator sits on top); ResourceExhausted
  // when the device is out of memory.
  virtual absl::StatusOr<void*> DeviceAlloc(size_t bytes) = 0;
  virtual absl::Status DeviceFree(void* ptr) = 0;
  // Page-locked host memory: copies from and to it can run asynchronously.
  virtual absl::StatusOr<void*> HostAllocPinned(size_t bytes) = 0;
  virtual absl::Status HostFreePinned(void* ptr) = 0;

  // Stream-ordered copies and fills. A copy that touches pageable host
  // memory returns only once the host side may be reused (as cudaMemcpyAsync
  // does); with pinned host memory or device-to-device it may return at once.
  virtual absl::Status Copy(void* dst, const void* src, size_t bytes,
                            CopyKind kind, Stream stream) = 0;
  virtual absl::Status Memset(void* dst, uint8_t value, size_t bytes,
                              Stream stream) = 0;

  virtual absl::StatusOr<Stream> CreateStream() = 0;
  virtual absl::Status DestroyStream(Stream stream) = 0;
  virtual absl::Status SynchronizeStream(Stream stream) = 0;
  virtual absl::Status SynchronizeDevice() = 0;

  // `timing` kOn: ElapsedMs may measure between it and another such event
  // (the profiler's events). kOff: the event only orders work and is
  // cheaper to record and wait on; ElapsedMs refuses it, as the driver does
  // (CU_EVENT_DISABLE_TIMING).
  enum class EventTiming { kOff, kOn };
  virtual absl::StatusOr<Event> CreateEvent(EventTiming timing) = 0;
  // While `stream` is captured, the record is part of the graph: each
  // launch records the event again (the profiler times graph kernels so).
  virtual absl::Status RecordEvent(Event event, Stream stream) = 0;
  virtual absl::StatusOr<bool> QueryEvent(Event event) = 0;
  virtual absl::Status SynchronizeEvent(Event event) = 0;
  // Work queued on `stream` after this waits for `event`.
  virtual absl::Status StreamWaitEvent(Stream stream, Event event) = 0;
  // Milliseconds between two completed events (both created by this backend).
  virtual absl::StatusOr<float> ElapsedMs(Event start, Event end) = 0;
  virtual void DestroyEvent(Event event) = 0;

  // Compiles `source` (one translation unit of extern "C" __global__
  // kernels named in `kernels`) for Arch() through the kernel cache, and
  // loads it. InvalidArgument with the compiler's log when it does not
  // compile; never aborts.
  virtual absl::StatusOr<std::shared_ptr<LoadedModule>> LoadSource(
      const std::string& source, const std::string& name,
      const std::vector<std::string>& kernels) = 0;
  // Queues `kernel` with `grid` blocks of `block` threads; `args[i]` points
  // at the value of argument i (cuLaunchKernel's convention). The module
  // holding the kernel must stay loaded until the launch has run.
  virtual absl::Status Launch(KernelHandle kernel, int64_t grid, int block,
                              void** args, Stream stream) = 0;

  // Device GEMM (cuBLASLt on the driver), queued on `stream`.
  virtual absl::Status Gemm(const DeviceGemmArgs& args, Stream stream) = 0;

  // Graphs: work queued on `stream` between BeginCapture and EndCapture is
  // recorded, not run (only `stream` may be captured at a time; a
  // synchronizing call on it while capturing is FailedPrecondition).
  // LaunchGraph replays the recording on `stream`, with the same pointers
  // and argument values it was captured with.
  virtual absl::Status BeginCapture(Stream stream) = 0;
  virtual absl::StatusOr<GraphHandle> EndCapture(Stream stream) = 0;
  virtual absl::Status LaunchGraph(GraphHandle graph, Stream stream) = 0;
  virtual void DestroyGraph(GraphHandle graph) = 0;
};

// The backend CUDA tensors use: the one SetBackend installed, else the
// driver backend when a device is available, else null.
Backend* GetBackend();
// GetBackend(), or FailedPrecondition/Unavailable saying why there is no
// CUDA device (no driver, no GPU) and that CPU tensors still work.
absl::StatusOr<Backend*> RequireBackend();
// Counts the backends installed so far: caches of backend objects (modules,
// pinned blocks) compare it, not the backend's address, which a new backend
// may reuse.
uint64_t BackendGeneration();

// GetBackend(), or throws stepjit::Error with RequireBackend()'s message.
Backend& BackendOrThrow();
// The host emulator (testing/cuda_emulator/) is not part of the library: a
// program that links the test-support library stepjit_cuda_emulator (the
// tests, stepjit-bench, the examples) registers its factory here when it
// starts, and STEPJIT_CUDA_BACKEND=emulator then installs what it makes. In
// a program without it, that setting leaves CUDA unavailable and says why.
using BackendFactory = std::unique_ptr<Backend> (*)();
void RegisterEmulatorFactory(BackendFactory factory);

// Replaces the process's backend (tests install the host emulator); the
// previous one, its allocator and its cached modules are destroyed, so no
// CUDA tensor may be alive. Null goes back to detection.
void SetBackend(std::unique_ptr<Backend> backend);

// The caching allocator's raw memory and events over `backend` (which must
// outlive it). While a FreeHold is active (CUDA-graph capture) no event is
// recorded or queried (both are illegal on a capturing thread): blocks stay
// with their stream and pending ones stay pending until the capture ends.
std::unique_ptr<DeviceMemoryBackend> MakeAllocatorBackend(Backend* backend);

// The caching allocator over GetBackend()'s device memory (created with the
// backend). Requires a backend.
CachingAllocator& DeviceAllocator();

// While a FreeHold exists (one at a time in the process), device storage
// freed anywhere is not returned to the allocator but kept for the hold:
// CUDA-graph capture uses this so that no buffer a graph reads or writes is
// ever handed to another tensor. Take() hands the held pointers over (free
// them with DeviceAllocator().Free when the graph is destroyed).
class FreeHold {
 public:
  FreeHold();
  ~FreeHold();
  FreeHold(const FreeHold&) = delete;
  FreeHold& operator=(const FreeHold&) = delete;
  std::vector<void*> Take();
};
// Called by storage on free: true when a FreeHold took the pointer.
bool HoldFree(void* ptr);
// True while a FreeHold exists, i.e. while a CUDA graph is being captured.
bool CaptureUnderway();

// The stream eager CUDA ops and copies are queued on, per thread (0 unless
// a StreamGuard says otherwise).
Stream CurrentStream();
class StreamGuard {
 public:
  explicit StreamGuard(Stream stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_BACKEND_H_
