// The dist runtime: the process group from the launcher's environment, the
// communication thread that owns MPI, and the collective ops' CPU kernels.
#include "dist/dist.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "config/env.h"
#include "dist/dist_internal.h"
#include "dist/mpi.h"
#include "ir/op_attrs.h"
#include "ir/parse_number.h"
#include "ir/status.h"
#include "runtime/device_runtime.h"
#include "runtime/dispatch.h"
#include "runtime/pending.h"
#include "runtime/profiler.h"

namespace stepjit::dist {

using ir::AttrKey;
using ir::OpId;

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "sum";
}

ReduceOp ParseReduceOp(const std::string& name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "avg") return ReduceOp::kAvg;
  if (name == "max") return ReduceOp::kMax;
  throw Error(absl::StrCat("dist: unknown reduce op \"", name,
                           "\"; expected \"sum\", \"avg\" or \"max\""));
}

namespace internal {
namespace {

double NowSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One collective on the communication thread.
class Work : public runtime::PendingWork {
 public:
  Work(std::string what, int64_t seq, std::function<absl::Status()> fn,
       std::optional<CollectiveHeader> header)
      : what_(std::move(what)),
        seq_(seq),
        fn_(std::move(fn)),
        header_(header) {}

  void Run();
  void Wait() override;

 private:
  friend struct World;
  std::string what_;
  int64_t seq_;
  // The collective; it holds the tensors it reads and writes, so they stay
  // alive until the work is destroyed.
  std::function<absl::Status()> fn_;
  // Exchanged with the other ranks before the collective runs (all but
  // MPI_Init), its seq numbered on the communication thread.
  std::optional<CollectiveHeader> header_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  absl::Status status_;
};

struct World {
  std::mutex mu;  // init and shutdown
  bool initialized = false;
  bool finalized = false;
  InitOptions options;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  std::string launcher = "single";
  bool mpi = false;
  double timeout_s = 300;
  std::atomic<bool> healthy{true};
  std::mutex failure_mu;
  std::string failure;
  std::atomic<int64_t> next_seq{0};
  int64_t checked =
      0;  // collectives whose headers were exchanged (comm thread)

  std::mutex stats_mu;
  Stats stats;

  // The communication thread.
  std::thread thread;
  std::mutex queue_mu;
  std::condition_variable queue_cv;
  std::deque<std::shared_ptr<Work>> queue;
  bool stop = false;
  // The work submitted last: the thread runs works in order, so once it is
  // done every earlier one is (wait_all).
  std::shared_ptr<Work> last;

  void Loop() {
    for (;;) {
      std::shared_ptr<Work> w;
      {
        std::unique_lock<std::mutex> lock(queue_mu);
        queue_cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        w = std::move(queue.front());
        queue.pop_front();
      }
      w->Run();
    }
  }

  void Fail(const std::string& message) {
    healthy.store(false);
    std::lock_guard<std::mutex> lock(failure_mu);
    if (failure.empty()) failure = message;
  }
  std::string Failure() {
    std::lock_guard<std::mutex> lock(failure_mu);
    return failure;
  }
};

World& W() {
  static World* w = new World();  // the thread may outlive static destructors
  return *w;
}

void Work::Run() {
  absl::Status st;
  const double start = NowSeconds();
  const int64_t begin_ns = runtime::ProfileNowNs();
  if (!W().healthy.load()) {
    st = absl::AbortedError("not run: an earlier collective failed");
  } else {
    if (header_) {
      header_->seq = W().checked++;
      st = MpiCheckHeader(*header_);
    }
    if (st.ok()) st = fn_();
  }
  // Drops the tensors the collective held: its result's storage may hold
  // this work (runtime/pending.h), which must not keep that storage alive.
  fn_ = nullptr;
  const double busy = NowSeconds() - start;
  if (runtime::ProfilingEnabled()) {
    runtime::TraceEvent e;
    e.name = absl::StrCat(what_, " (comm)");
    e.cat = runtime::kCatComm;
    e.begin_ns = begin_ns;
    e.dur_ns = runtime::ProfileNowNs() - begin_ns;
    e.tid = runtime::HostTrack();
    runtime::RecordEvent(std::move(e));
  }
  {
    std::lock_guard<std::mutex> lock(W().stats_mu);
    W().stats.busy_seconds += busy;
    if (st.ok()) ++W().stats.collectives;
  }
  std::lock_guard<std::mutex> lock(mu_);
  status_ = st;
  done_ = true;
  cv_.notify_all();
}

void Work::Wait() {
  World& w = W();
  const double start = NowSeconds();
  std::optional<runtime::ProfileSpan> span;
  if (runtime::ProfilingEnabled()) {
    span.emplace(runtime::kCatComm);
    span->set_name("dist wait");
  }
  std::unique_lock<std::mutex> lock(mu_);
  const bool finished = cv_.wait_for(
      lock, std::chrono::duration<double>(w.timeout_s), [&] { return done_; });
  {
    std::lock_guard<std::mutex> s(w.stats_mu);
    w.stats.wait_seconds += NowSeconds() - start;
  }
  if (!finished) {
    const std::string message = absl::StrCat(
        "dist: ", what_, " (collective #", seq_, ") did not finish on rank ",
        w.rank, " of ", w.size, " within ", w.timeout_s,
        " s (STEPJIT_DIST_TIMEOUT_S): a peer rank died, hung, or called a "
        "different "
        "collective; this process can no longer communicate");
    w.Fail(message);
    throw Error(message);
  }
  if (!status_.ok()) {
    const std::string message = absl::StrCat(
        "dist: ", what_, " (collective #", seq_, ") failed on rank ", w.rank,
        " of ", w.size, ": ", status_.message());
    w.Fail(message);
    throw Error(message);
  }
}

std::shared_ptr<Work> Submit(
    std::string what, std::function<absl::Status()> fn,
    std::optional<CollectiveHeader> header = std::nullopt) {
  World& w = W();
  auto work = std::make_shared<Work>(std::move(what), w.next_seq++,
                                     std::move(fn), header);
  {
    std::lock_guard<std::mutex> lock(w.queue_mu);
    w.queue.push_back(work);
    w.last = work;
  }
  w.queue_cv.notify_one();
  return work;
}

// Waits for every work submitted so far (the last one: they run in order).
void WaitForAll() {
  World& w = W();
  std::shared_ptr<Work> last;
  {
    std::lock_guard<std::mutex> lock(w.queue_mu);
    last = w.last;
  }
  if (last != nullptr) last->Wait();
}

std::optional<int> EnvInt(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return static_cast<int>(
      ValueOrThrow(ir::ParseInteger(absl::StrCat("dist::init: ", name), v, 0,
                                    std::numeric_limits<int>::max())));
}

bool LaunchedByMpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                           "PMI_RANK", "MPI_LOCALNRANKS", "SLURM_STEP_ID"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

constexpr double kMaxTimeoutS = 7 * 24 * 3600;

double TimeoutFrom(const InitOptions& options) {
  SJ_REQUIRE(
      std::isfinite(options.timeout_s) && options.timeout_s <= kMaxTimeoutS,
      "dist::init: InitOptions::timeout_s: expected seconds up to ",
      kMaxTimeoutS, " (<= 0: the default), got ", options.timeout_s);
  if (options.timeout_s > 0) return options.timeout_s;
  // At most a week (config/env.def): a timeout must end a hung job, and a
  // larger value (inf, 1e10) would overflow the deadline's clock arithmetic.
  return config::RealOrThrow(config::Env::kDistTimeoutS).value_or(300);
}

int LocalRankFromEnv() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                           "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (std::optional<int> v = EnvInt(name)) return *v;
  }
  return 0;
}

void InitMpi(World& w) {
  SJ_REQUIRE(MpiBuilt(),
             "dist::init: the process was launched by MPI (mpirun/srun) but "
             "this stepjit build "
             "has no MPI; install libopenmpi-dev (Debian) and reconfigure");
  w.thread = std::thread([&w] { w.Loop(); });
  int rank = 0, size = 1;
  std::shared_ptr<Work> init =
      Submit("MPI_Init", [&] { return MpiInit(&rank, &size); });
  init->Wait();
  w.rank = rank;
  w.size = size;
  w.mpi = true;
  w.launcher = "mpi";
}

void Shutdown(World& w, bool at_exit) {
  std::lock_guard<std::mutex> lock(w.mu);
  if (!w.initialized || w.finalized) return;
  w.finalized = true;
  if (!w.thread.joinable()) return;
  if (!w.healthy.load()) {
    // The communication thread may be stuck in a collective a dead peer
    // will never join: end the whole job instead of hanging in finalize.
    std::fprintf(stderr, "stepjit dist: rank %d of %d aborts the job: %s\n",
                 w.rank, w.size, w.Failure().c_str());
    std::fflush(stderr);
    MpiAbort(1);
    w.thread.detach();
    return;
  }
  try {
    WaitForAll();
    Submit(
        "MPI_Finalize",
        [] {
          MpiFinalize();
          return absl::OkStatus();
        },
        CollectiveHeader{.kind = CollectiveHeader::kFinalize})
        ->Wait();
  } catch (const Error& e) {
    if (!at_exit) throw;
    std::fprintf(stderr, "stepjit dist: %s\n", e.what());
  }
  {
    std::lock_guard<std::mutex> q(w.queue_mu);
    w.stop = true;
  }
  w.queue_cv.notify_one();
  if (w.healthy.load()) {
    w.thread.join();
  } else {
    w.thread.detach();
  }
}

}  // namespace

}  // namespace internal

void init(const InitOptions& options) {
  using internal::W;
  internal::World& w = W();
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.initialized) {
    SJ_REQUIRE(!w.finalized, "dist::init: called after dist::shutdown()");
    SJ_REQUIRE(options.backend == w.options.backend,
               "dist::init: already initialized with backend \"",
               w.options.backend, "\", called again with \"", options.backend,
               "\"");
    return;
  }
  SJ_REQUIRE(options.backend == "auto" || options.backend == "mpi" ||
                 options.backend == "single",
             "dist::init: unknown backend \"", options.backend,
             "\"; expected \"auto\", \"mpi\" or \"single\"");
  w.options = options;
  w.timeout_s = internal::TimeoutFrom(options);
  const std::optional<int> env_rank = internal::EnvInt("RANK");
  const std::optional<int> env_world = internal::EnvInt("WORLD_SIZE");
  if (options.backend == "mpi" ||
      (options.backend == "auto" && internal::LaunchedByMpi())) {
    internal::InitMpi(w);
  } else if (options.backend == "auto" && (env_rank || env_world)) {
    SJ_REQUIRE(env_rank && env_world, "dist::init: found ",
               env_rank ? "RANK" : "WORLD_SIZE", " but not ",
               env_rank ? "WORLD_SIZE" : "RANK",
               " in the environment; a torchrun-style launch sets both");
    SJ_REQUIRE(*env_world >= 1 && *env_rank >= 0 && *env_rank < *env_world,
               "dist::init: RANK=", *env_rank,
               " is not in [0, WORLD_SIZE=", *env_world, ")");
    w.rank = *env_rank;
    w.size = *env_world;
    w.launcher = "torchrun";
  }
  w.local_rank = w.launcher == "single" ? 0 : internal::LocalRankFromEnv();
  w.initialized = true;
  static bool registered = [] {
    std::atexit([] { internal::Shutdown(W(), /*at_exit=*/true); });
    return true;
  }();
  (void)registered;
}

bool is_initialized() {
  internal::World& w = internal::W();
  std::lock_guard<std::mutex> lock(w.mu);
  return w.initialized && !w.finalized;
}

void shutdown() { internal::Shutdown(internal::W(), /*at_exit=*/false); }

int rank() { return internal::W().rank; }
int world_size() { return internal::W().size; }
int local_rank() { return internal::W().local_rank; }
std::string launcher() { return internal::W().launcher; }
bool healthy() { return internal::W().healthy.load(); }
double timeout_seconds() { return internal::W().timeout_s; }

Stats stats() {
  std::lock_guard<std::mutex> lock(internal::W().stats_mu);
  return internal::W().stats;
}

void check_same(const std::string& name, const std::string& value) {
  internal::World& w = internal::W();
  SJ_REQUIRE(w.initialized,
             "dist::check_same: dist::init() has not been called");
  SJ_REQUIRE(!w.finalized, "dist::check_same: called after dist::shutdown()");
  if (w.size == 1) return;
  if (!w.healthy.load())
    throw Error(absl::StrCat("dist::check_same: an earlier collective failed (",
                             w.Failure(), ")"));
  SJ_REQUIRE(w.mpi, "dist::check_same: ", w.size, " ranks launched by ",
             w.launcher, " have no MPI between them; launch with mpirun");
  const uint64_t name_hash = internal::Fnv1a(name);
  internal::Submit(
      absl::StrCat("check_same of ", name),
      [name, value] { return internal::MpiCheckSame(name, value); },
      internal::CollectiveHeader{.kind = internal::CollectiveHeader::kCheckSame,
                                 .aux = static_cast<int64_t>(name_hash >> 1)})
      ->Wait();
}

Tensor all_reduce(const Tensor& x, ReduceOp op) {
  return runtime::Dispatch(
      OpId::kAllReduce, {x},
      {{AttrKey::kReduceOp, std::string(ReduceOpName(op))}});
}

void all_reduce_(Tensor& x, ReduceOp op) {
  Tensor r = all_reduce(x, op);
  x.copy_(r);
}

Tensor broadcast(const Tensor& x, int root) {
  SJ_REQUIRE(root >= 0 && root < world_size(), "dist::broadcast: root ", root,
             " is not a rank of this world of ", world_size());
  return runtime::Dispatch(OpId::kBroadcast, {x},
                           {{AttrKey::kRoot, int64_t{root}}});
}

Tensor all_gather(const Tensor& x) {
  return runtime::Dispatch(OpId::kAllGather, {x},
                           {{AttrKey::kWorldSize, int64_t{world_size()}}});
}

void barrier() { runtime::Dispatch(OpId::kBarrier, {}, {}); }

Work::Work(Tensor result) : result_(std::move(result)) {
  if (result_.defined()) work_ = result_.storage()->pending();
}

void Work::wait() const {
  if (work_ != nullptr) work_->Wait();
  runtime::WaitPending(result_);
}

const Tensor& Work::result() const {
  wait();
  return result_;
}

Work all_reduce_async(const Tensor& x, ReduceOp op, int64_t bucket) {
  ir::Attrs attrs{{AttrKey::kReduceOp, std::string(ReduceOpName(op))},
                  {AttrKey::kAsync, true}};
  if (bucket >= 0) attrs.Set(AttrKey::kBucket, bucket);
  // (the bucket only labels the work in messages and profiles)
  return Work(runtime::Dispatch(OpId::kAllReduce, {x}, attrs));
}

void wait_all() { internal::WaitForAll(); }

namespace internal {
namespace {

// Element loops on the communication thread (never the kernel thread pool,
// which belongs to the thread that issued the collective).
void Scale(void* data, int64_t n, ir::DType dtype, double factor) {
  if (dtype == ir::DType::kF64) {
    double* p = static_cast<double*>(data);
    for (int64_t i = 0; i < n; ++i) p[i] *= factor;
  } else {
    float* p = static_cast<float*>(data);
    const float f = static_cast<float>(factor);
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  }
}

void ToF32(const Tensor& src, float* dst) {
  const int64_t n = src.numel();
  if (src.dtype() == ir::DType::kF16) {
    const ir::Half* p = src.data<ir::Half>();
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(p[i]);
  } else {
    const ir::BFloat16* p = src.data<ir::BFloat16>();
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(p[i]);
  }
}

void FromF32(const float* src, const Tensor& dst) {
  const int64_t n = dst.numel();
  if (dst.dtype() == ir::DType::kF16) {
    ir::Half* p = dst.data<ir::Half>();
    for (int64_t i = 0; i < n; ++i) p[i] = ir::Half(src[i]);
  } else {
    ir::BFloat16* p = dst.data<ir::BFloat16>();
    for (int64_t i = 0; i < n; ++i) p[i] = ir::BFloat16(src[i]);
  }
}

std::string Describe(OpId op, const ir::Attrs& attrs, const Tensor& x) {
  std::string s(ir::OpName(op));
  if (op == OpId::kAllReduce)
    absl::StrAppend(&s, " ", ir::AttrString(op, attrs, ir::AttrKey::kReduceOp));
  if (attrs.Has(AttrKey::kBucket))
    absl::StrAppend(&s, " bucket ", attrs.GetInt(AttrKey::kBucket));
  if (x.defined())
    absl::StrAppend(&s, " of ", ir::DTypeName(x.dtype()),
                    ir::ShapeToString(x.shape()));
  return s;
}

}  // namespace

void CheckUsable(OpId op) {
  World& w = W();
  SJ_REQUIRE(w.initialized, ir::OpName(op),
             ": dist::init() has not been called");
  SJ_REQUIRE(!w.finalized, ir::OpName(op), ": called after dist::shutdown()");
  if (!w.healthy.load()) {
    throw Error(absl::StrCat(ir::OpName(op), ": an earlier collective failed (",
                             w.Failure(), ")"));
  }
}

bool CanRunOnHost() { return W().size == 1 || W().mpi; }

std::string HostCollectivesUnavailable(OpId op) {
  World& w = W();
  return absl::StrCat(
      ir::OpName(op), ": ", w.size, " ranks launched by ", w.launcher,
      " have no MPI between them for CPU tensors; launch with `mpirun -np ",
      w.size, "` (or srun), or use CUDA tensors (NCCL)");
}

void RunHostCollective(const runtime::KernelArgs& k) {
  World& w = W();
  CheckUsable(k.op);
  const bool async = k.attrs.GetBool(AttrKey::kAsync);
  const Tensor in = k.inputs.empty() ? Tensor() : k.inputs[0];
  const Tensor& out = k.out;
  if (w.size == 1) {
    // A world of one: every collective returns its operand.
    if (k.op != OpId::kBarrier)
      runtime::GetDeviceRuntime(DeviceType::kCPU).copy_into(out, in);
    return;
  }
  SJ_REQUIRE(w.mpi, HostCollectivesUnavailable(k.op));
  const std::string what = Describe(k.op, k.attrs, in);
  std::shared_ptr<Work> work;
  const int size = w.size;
  switch (k.op) {
    case OpId::kBarrier:
      work = Submit(
          what, [] { return MpiBarrier(); },
          CollectiveHeader{.kind = CollectiveHeader::kBarrier});
      break;
    case OpId::kAllReduce: {
      const ReduceOp op =
          ParseReduceOp(ir::AttrString(k.op, k.attrs, ir::AttrKey::kReduceOp));
      const bool half =
          in.dtype() == ir::DType::kF16 || in.dtype() == ir::DType::kBF16;
      const Tensor src = in.is_contiguous() ? in : in.clone();
      const int64_t n = src.numel();
      // The dtype the user reduces (a 16-bit float travels as f32).
      const CollectiveHeader header{.kind = CollectiveHeader::kAllReduce,
                                    .dtype = static_cast<int64_t>(in.dtype()),
                                    .count = n,
                                    .aux = static_cast<int64_t>(op)};
      if (half) {
        // MPI has no 16-bit floats: reduce in f32 (as NCCL accumulates).
        Tensor staged = empty(src.shape(), {.dtype = ir::DType::kF32});
        ToF32(src, staged.data<float>());
        work = Submit(
            what,
            [staged, out, n, op, size]() -> absl::Status {
              float* p = staged.data<float>();
              if (absl::Status s = MpiAllReduce(p, p, n, ir::DType::kF32, op);
                  !s.ok())
                return s;
              if (op == ReduceOp::kAvg)
                Scale(p, n, ir::DType::kF32, 1.0 / size);
              FromF32(p, out);
              return absl::OkStatus();
            },
            header);
      } else {
        const ir::DType dtype = src.dtype();
        work = Submit(
            what,
            [src, out, n, dtype, op, size]() -> absl::Status {
              if (absl::Status s = MpiAllReduce(src.data_ptr(), out.data_ptr(),
                                                n, dtype, op);
                  !s.ok())
                return s;
              if (op == ReduceOp::kAvg)
                Scale(out.data_ptr(), n, dtype, 1.0 / size);
              return absl::OkStatus();
            },
            header);
      }
      std::lock_guard<std::mutex> lock(w.stats_mu);
      w.stats.bytes += n * ir::DTypeSize(in.dtype());
      break;
    }
    case OpId::kBroadcast: {
      const int root =
          static_cast<int>(ir::AttrInt(k.op, k.attrs, ir::AttrKey::kRoot));
      SJ_REQUIRE(root < size, "broadcast: root ", root,
                 " is not a rank of this world of ", size);
      runtime::GetDeviceRuntime(DeviceType::kCPU).copy_into(out, in);
      const int64_t bytes = out.numel() * ir::DTypeSize(out.dtype());
      work = Submit(
          what,
          [out, bytes, root] {
            return MpiBroadcast(out.data_ptr(), bytes, root);
          },
          CollectiveHeader{.kind = CollectiveHeader::kBroadcast,
                           .count = bytes,
                           .aux = root});
      std::lock_guard<std::mutex> lock(w.stats_mu);
      w.stats.bytes += bytes;
      break;
    }
    case OpId::kAllGather: {
      SJ_REQUIRE(k.attrs.GetInt(AttrKey::kWorldSize) == size,
                 "all_gather: recorded for a world of ",
                 k.attrs.GetInt(AttrKey::kWorldSize),
                 " ranks, running in a world of ", size);
      const Tensor src = in.is_contiguous() ? in : in.clone();
      const int64_t bytes = src.numel() * ir::DTypeSize(src.dtype());
      work = Submit(
          what,
          [src, out, bytes] {
            return MpiAllGather(src.data_ptr(), out.data_ptr(), bytes);
          },
          CollectiveHeader{.kind = CollectiveHeader::kAllGather,
                           .count = bytes});
      std::lock_guard<std::mutex> lock(w.stats_mu);
      w.stats.bytes += bytes * size;
      break;
    }
    default:
      SJ_CHECK(false, "not a collective: ", ir::OpName(k.op));
  }
  if (async && out.defined()) {
    runtime::SetPending(*out.storage(), work);
  } else {
    work->Wait();
  }
}

bool HasMpi() { return W().mpi; }

std::string InitFile() { return W().options.init_file; }

void MarkFailed(const std::string& message) { W().Fail(message); }

void BroadcastBytes(void* data, size_t bytes, int root) {
  World& w = W();
  SJ_CHECK(w.mpi, "BroadcastBytes without MPI");
  std::shared_ptr<Work> work = Submit(
      absl::StrCat("broadcast of ", bytes, " bytes from rank ", root),
      [data, bytes, root] {
        return MpiBroadcast(data, static_cast<int64_t>(bytes), root);
      },
      CollectiveHeader{.kind = CollectiveHeader::kBroadcast,
                       .count = static_cast<int64_t>(bytes),
                       .aux = root});
  work->Wait();
}

}  // namespace internal

}  // namespace stepjit::dist
