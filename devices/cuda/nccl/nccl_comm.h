// NcclComm: one NCCL communicator over the CUDA backend's device, with a
// watchdog that enforces the dist timeout.
//
// Collectives are queued on the caller's stream (the CUDA backend's current
// stream, which is a CUstream on the driver backend) and return at once, as
// NCCL's do; while the stream is captured they become nodes of the CUDA
// graph (NCCL 2.9+ supports capture), and a graph replay runs them again.
//
// Timeouts: an eager collective is followed by an event on its stream that
// the watchdog thread polls together with ncclCommGetAsyncError. When the
// event has not completed within the timeout, or NCCL reports an
// asynchronous error (a peer died, the network failed), the watchdog aborts
// the communicator (ncclCommAbort makes the kernels of a hung collective
// return, so a waiting stream drains) and every later call returns the
// error naming the collective, its sequence number, the rank and the
// timeout. Captured collectives are not watched (an event recorded during
// capture belongs to the graph); a hung graph replay is caught by the next
// eager collective's wait or by the caller's synchronize.
#ifndef STEPJIT_DEVICES_CUDA_NCCL_NCCL_COMM_H_
#define STEPJIT_DEVICES_CUDA_NCCL_NCCL_COMM_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "devices/cuda/backend.h"
#include "devices/cuda/nccl/nccl_library.h"
#include "ir/dtype.h"

namespace stepjit::runtime::cuda {

struct NcclCommOptions {
  int rank = 0;
  int world = 1;
  nccl::UniqueId id{};
  // Seconds for ncclCommInitRank (all ranks must join) and for each eager
  // collective to complete on the device.
  double timeout_s = 300;
  // Called once, with the lock held, when the communicator fails (the dist
  // world is marked unhealthy so).
  std::function<void(const absl::Status&)> on_failure = nullptr;
};

class NcclComm {
 public:
  // Joins the communicator on `backend`'s device (the driver backend; the
  // host emulator has no device NCCL could use: FailedPrecondition).
  // Blocks until all `world` ranks have called it with the same id, or
  // DeadlineExceeded after the timeout (NCCL's blocking init cannot be
  // cancelled: the process should then stop using NCCL).
  static absl::StatusOr<std::unique_ptr<NcclComm>> Create(
      const NcclLibrary& lib, Backend& backend, const NcclCommOptions& options);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // The collectives over device buffers of `dtype`, queued on `stream`.
  // `count` is elements per rank (all_gather's recv holds world * count).
  // InvalidArgument for a dtype NCCL has no type for (bool); the stored
  // failure when the communicator was aborted.
  absl::Status AllReduce(const void* send, void* recv, size_t count,
                         ir::DType dtype, nccl::RedOp op, Stream stream);
  absl::Status Broadcast(const void* send, void* recv, size_t count,
                         ir::DType dtype, int root, Stream stream);
  absl::Status AllGather(const void* send, void* recv, size_t count,
                         ir::DType dtype, Stream stream);

  // Blocks until every watched collective completed, with the same timeout
  // and abort as the watchdog.
  absl::Status WaitAll();

  // OK, or why the communicator was aborted.
  absl::Status health() const;
  int rank() const { return rank_; }
  int world() const { return world_; }
  int64_t collectives() const { return sequence_; }
  const NcclLibrary& library() const { return lib_; }

 private:
  NcclComm(const NcclLibrary& lib, Backend& backend, nccl::Comm comm,
           const NcclCommOptions& options);
  // Binds the device's primary context on this thread (NCCL's CUDA runtime
  // calls act on the current context).
  absl::Status Bind() const;
  // Checks health, enqueues `call` under the lock, then watches it.
  template <typename Call>
  absl::Status Enqueue(const char* what, size_t bytes, Stream stream,
                       Call call);
  void Watchdog();
  // Aborts the communicator with `why` (first failure wins); mu_ held.
  void FailLocked(absl::Status why);

  struct Watched {
    Event done = 0;
    std::chrono::steady_clock::time_point deadline;
    std::string what;  // "all_reduce #12 (4096 bytes)"
  };

  const NcclLibrary& lib_;
  Backend& backend_;
  nccl::Comm comm_;
  const int rank_, world_;
  const double timeout_s_;
  const std::function<void(const absl::Status&)> on_failure_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Watched> watched_;
  absl::Status failure_;
  bool aborted_ = false;
  bool stop_ = false;
  int64_t sequence_ = 0;
  std::thread watchdog_;
};

// NCCL's type for a stepjit dtype; InvalidArgument for bool.
absl::StatusOr<nccl::DataType> NcclType(ir::DType dtype);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_NCCL_NCCL_COMM_H_
