// NcclComm: communicator creation with a deadline, collectives on the
// caller's stream, and the watchdog that aborts on timeout or async error.
#include "devices/cuda/nccl/nccl_comm.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(s));
}

nccl::CudaStream AsCudaStream(Stream s) {
  return reinterpret_cast<nccl::CudaStream>(s);
}

// What ncclCommInitRank's thread hands back; shared so that a thread that
// outlives a timed-out Create writes into memory that still exists.
struct InitState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  nccl::Result result = nccl::kSuccess;
  nccl::Comm comm = nullptr;
  absl::Status bind;
};

}  // namespace

absl::StatusOr<nccl::DataType> NcclType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32:
      return nccl::kFloat32;
    case ir::DType::kF64:
      return nccl::kFloat64;
    case ir::DType::kF16:
      return nccl::kFloat16;
    case ir::DType::kBF16:
      return nccl::kBfloat16;
    case ir::DType::kI64:
      return nccl::kInt64;
    case ir::DType::kI32:
      return nccl::kInt32;
    case ir::DType::kBool:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("NCCL has no type for ", ir::DTypeName(dtype),
                   " tensors; expected f32, f64, f16, bf16, "
                   "i32 or i64"));
}

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(
    const NcclLibrary& lib, Backend& backend, const NcclCommOptions& options) {
  const int ordinal = backend.DeviceOrdinal();
  if (ordinal < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "NCCL needs a CUDA device; the CUDA backend is ", backend.Describe()));
  }
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL communicator: rank ", options.rank,
                     " of a world of ", options.world));
  }
  // ncclCommInitRank blocks until every rank joined and cannot be
  // cancelled, so it runs on a thread of its own that the caller waits for
  // with the timeout.
  auto state = std::make_shared<InitState>();
  std::thread([state, &lib, &backend, options] {
    absl::Status bind = backend.BindThread();
    nccl::Comm comm = nullptr;
    nccl::Result r = nccl::kSuccess;
    if (bind.ok())
      r = lib.api.CommInitRank(&comm, options.world, options.id, options.rank);
    std::lock_guard<std::mutex> lock(state->mu);
    state->bind = bind;
    state->result = r;
    state->comm = comm;
    state->done = true;
    state->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(state->mu);
  if (!state->cv.wait_for(lock, Seconds(options.timeout_s),
                          [&] { return state->done; })) {
    return absl::DeadlineExceededError(
        absl::StrFormat("rank %d: ncclCommInitRank (world of %d) did not "
                        "finish within %.1f s: not every rank "
                        "joined with the same unique id (a rank died, was not "
                        "started, or read another id); "
                        "this process can no longer use NCCL",
                        options.rank, options.world, options.timeout_s));
  }
  RETURN_IF_ERROR(state->bind);
  RETURN_IF_ERROR(
      NcclStatus(lib, state->result,
                 absl::StrCat("ncclCommInitRank(rank ", options.rank, " of ",
                              options.world, ")")));
  return std::unique_ptr<NcclComm>(
      new NcclComm(lib, backend, state->comm, options));
}

NcclComm::NcclComm(const NcclLibrary& lib, Backend& backend, nccl::Comm comm,
                   const NcclCommOptions& options)
    : lib_(lib),
      backend_(backend),
      comm_(comm),
      rank_(options.rank),
      world_(options.world),
      timeout_s_(options.timeout_s),
      on_failure_(options.on_failure),
      watchdog_([this] { Watchdog(); }) {}

NcclComm::~NcclComm() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  watchdog_.join();
  (void)Bind();
  for (const Watched& w : watched_) backend_.DestroyEvent(w.done);
  // Destroy waits for queued work; a failed communicator was aborted
  // already (FailLocked), and destroying it could wait forever.
  if (!aborted_) lib_.api.CommDestroy(comm_);
}

absl::Status NcclComm::Bind() const { return backend_.BindThread(); }

absl::Status NcclComm::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

template <typename Call>
absl::Status NcclComm::Enqueue(const char* what, size_t bytes, Stream stream,
                               Call call) {
  RETURN_IF_ERROR(Bind());
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(failure_);
  const int64_t seq = ++sequence_;
  const std::string label =
      absl::StrCat(what, " #", seq, " (", bytes, " bytes)");
  if (absl::Status s = NcclStatus(
          lib_, call(), absl::StrCat("rank ", rank_, ": nccl", label));
      !s.ok()) {
    FailLocked(s);
    return s;
  }
  // Inside a capture the event would be part of the graph: not watched.
  if (CaptureUnderway()) return absl::OkStatus();
  ASSIGN_OR_RETURN(Event done,
                   backend_.CreateEvent(Backend::EventTiming::kOff));
  if (absl::Status s = backend_.RecordEvent(done, stream); !s.ok()) {
    backend_.DestroyEvent(done);
    return s;
  }
  watched_.push_back({done, Clock::now() + Seconds(timeout_s_), label});
  cv_.notify_all();
  return absl::OkStatus();
}

absl::Status NcclComm::AllReduce(const void* send, void* recv, size_t count,
                                 ir::DType dtype, nccl::RedOp op,
                                 Stream stream) {
  ASSIGN_OR_RETURN(nccl::DataType type, NcclType(dtype));
  return Enqueue("AllReduce", count * ir::DTypeSize(dtype), stream, [&] {
    return lib_.api.AllReduce(send, recv, count, type, op, comm_,
                              AsCudaStream(stream));
  });
}

absl::Status NcclComm::Broadcast(const void* send, void* recv, size_t count,
                                 ir::DType dtype, int root, Stream stream) {
  ASSIGN_OR_RETURN(nccl::DataType type, NcclType(dtype));
  if (root < 0 || root >= world_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast from rank ", root, " in a world of ", world_));
  }
  return Enqueue("Broadcast", count * ir::DTypeSize(dtype), stream, [&] {
    return lib_.api.Broadcast(send, recv, count, type, root, comm_,
                              AsCudaStream(stream));
  });
}

absl::Status NcclComm::AllGather(const void* send, void* recv, size_t count,
                                 ir::DType dtype, Stream stream) {
  ASSIGN_OR_RETURN(nccl::DataType type, NcclType(dtype));
  return Enqueue("AllGather", count * ir::DTypeSize(dtype), stream, [&] {
    return lib_.api.AllGather(send, recv, count, type, comm_,
                              AsCudaStream(stream));
  });
}

void NcclComm::FailLocked(absl::Status why) {
  if (!failure_.ok()) return;
  failure_ = std::move(why);
  if (on_failure_) on_failure_(failure_);
  if (!aborted_) {
    (void)Bind();
    lib_.api.CommAbort(comm_);
    aborted_ = true;
  }
  for (const Watched& w : watched_) backend_.DestroyEvent(w.done);
  watched_.clear();
  cv_.notify_all();
}

// Polls the oldest watched collective's event (they complete in stream
// order on one stream; on several, the oldest still bounds the wait) and
// NCCL's async error every millisecond while anything is watched.
void NcclComm::Watchdog() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (watched_.empty() || !failure_.ok()) {
      cv_.wait(lock);
      continue;
    }
    Watched& front = watched_.front();
    absl::StatusOr<bool> done = backend_.QueryEvent(front.done);
    if (done.ok() && *done) {
      backend_.DestroyEvent(front.done);
      watched_.pop_front();
      cv_.notify_all();
      continue;
    }
    nccl::Result async = nccl::kSuccess;
    const nccl::Result r = lib_.api.CommGetAsyncError(comm_, &async);
    if (!done.ok()) {
      FailLocked(absl::InternalError(
          absl::StrCat("rank ", rank_, ": waiting for ", front.what, ": ",
                       done.status().message())));
    } else if (r != nccl::kSuccess ||
               (async != nccl::kSuccess && async != nccl::kInProgress)) {
      FailLocked(absl::UnavailableError(absl::StrCat(
          "rank ", rank_, ": NCCL failed during ", front.what, ": ",
          NcclStatus(lib_, r != nccl::kSuccess ? r : async,
                     "ncclCommGetAsyncError")
              .message(),
          "; the communicator was aborted and this process can no longer "
          "communicate")));
    } else if (Clock::now() >= front.deadline) {
      FailLocked(absl::DeadlineExceededError(
          absl::StrFormat("rank %d: NCCL %s did not complete within the "
                          "timeout of %.1f s (a peer rank died, "
                          "hung, or called a different collective); the "
                          "communicator was aborted and this "
                          "process can no longer communicate",
                          rank_, front.what, timeout_s_)));
    } else {
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }
}

absl::Status NcclComm::WaitAll() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return watched_.empty() || !failure_.ok(); });
  return failure_;
}

}  // namespace stepjit::runtime::cuda
