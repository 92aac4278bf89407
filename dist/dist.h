// Data-parallel collectives between processes: MPI (Open MPI) between CPU
// processes and hosts, NCCL (loaded at run time) between GPUs.
//
//   stepjit::dist::init();                       // from mpirun/srun/torchrun
//   env Tensor g = stepjit::dist::all_reduce(x, dist::ReduceOp::kAvg);
//
// Every collective is an op of ir/ops.def (all_reduce, broadcast,
// all_gather, barrier): it goes through runtime::Dispatch, so a traced step
// records it and a compiled step replays it. All ranks must call the same
// collectives in the same order with the same shapes and dtypes.
//
// Launch: `mpirun -np N prog` (Open MPI's OMPI_COMM_WORLD_* variables) and
// `srun` (PMI/PMIx, SLURM_* variables) use MPI; RANK / WORLD_SIZE /
// LOCAL_RANK (torchrun's) without an MPI launcher use NCCL only (CUDA
// tensors), with NCCL's unique id exchanged through a shared file
// (STEPJIT_DIST_INIT_FILE or InitOptions::init_file). Without any of these
// the process is a world of one and every collective returns its input.
//
// One communication thread per process owns MPI and runs the collectives in
// the order they were issued; a collective that does not finish within the
// timeout (a peer rank died, hung, or called a different collective) throws
// stepjit::Error naming the op, its sequence number, the rank and the
// timeout, and the process can no longer communicate (dist::healthy()).
#ifndef STEPJIT_DIST_DIST_H_
#define STEPJIT_DIST_DIST_H_

#include <cstdint>
#include <string>
#include <utility>

#include "runtime/pending.h"
#include "runtime/tensor.h"

namespace stepjit::dist {

enum class ReduceOp { kSum, kAvg, kMax };
// "sum", "avg", "max"; ParseReduceOp throws stepjit::Error on anything else.
const char* ReduceOpName(ReduceOp op);
ReduceOp ParseReduceOp(const std::string& name);

struct InitOptions {
  // "auto": MPI when launched by mpirun/srun, otherwise torchrun's
  // variables, otherwise a world of one. "mpi" requires an MPI launch;
  // "single" ignores the environment.
  std::string backend = "auto";
  // Seconds a collective may take before it is declared failed; <= 0 takes
  // STEPJIT_DIST_TIMEOUT_S, else 300.
  double timeout_s = 0;
  // Where torchrun-launched ranks exchange NCCL's unique id (rank 0 writes,
  // the others read); empty takes STEPJIT_DIST_INIT_FILE.
  std::string init_file = "";
};

// Joins the process group described by the environment. Idempotent (a second
// call with the same options does nothing); throws stepjit::Error on an
// inconsistent environment (RANK without WORLD_SIZE, rank >= world size,
// an MPI launch in a build without MPI, ...), naming what it found.
void init(const InitOptions& options = {});
bool is_initialized();
// Leaves the group (MPI_Finalize); also done at exit. Collectives after it
// throw.
void shutdown();

// 0 and 1 before init().
int rank();
int world_size();
// The rank among the processes on this host (LOCAL_RANK,
// OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID), used to pick a GPU.
int local_rank();
// "mpi", "torchrun", "single".
std::string launcher();
// False once a collective failed or timed out: further collectives throw
// at once instead of waiting again.
bool healthy();
double timeout_seconds();

// Checks that every rank has the same `value` for what `name` says (a flag,
// a model's parameter shapes): ranks that disagree would train silently on
// different settings, so each throws an Error naming every rank's value.
// A collective (every rank must call it, in the same order); nothing in a
// world of one.
void check_same(const std::string& name, const std::string& value);

// Element-wise reduction of `x` over all ranks: a new tensor of x's shape
// and dtype (kAvg needs a floating dtype). Traced and replayed.
Tensor all_reduce(const Tensor& x, ReduceOp op = ReduceOp::kSum);
// In place, as torch.distributed.all_reduce: x.copy_(all_reduce(x, op)).
void all_reduce_(Tensor& x, ReduceOp op = ReduceOp::kSum);
// Rank `root`'s x on every rank (same shape and dtype everywhere).
Tensor broadcast(const Tensor& x, int root = 0);
// Every rank's x joined along dim 0 in rank order: [world * x.size(0), ...]
// (a 0-d x gives [world]).
Tensor all_gather(const Tensor& x);
// Returns when every rank has reached it.
void barrier();

// A collective started without waiting for it, as torch.distributed's
// async_op=True handle: wait() blocks until it finished (throws
// stepjit::Error naming the collective if it failed or timed out, on every
// call), result() waits and returns what it wrote. The result's storage
// holds the work too, so an op that reads the result before wait() waits for
// it first (runtime/pending.h). In a world of one, and in a traced step's
// shape-only runs, there is nothing to wait for.
class Work {
 public:
  Work() = default;
  // `result`: the collective's output, whose storage holds the work still
  // writing it (none: nothing to wait for).
  explicit Work(Tensor result);
  void wait() const;
  const Tensor& result() const;
  bool defined() const { return result_.defined(); }

 private:
  Tensor result_;
  // Kept by the handle as well: once one reader has waited (and cleared the
  // storage's mark), a failed collective still fails every wait().
  std::shared_ptr<runtime::PendingWork> work_;
};

// Starts all_reduce(x, op) on the communication thread and returns at once.
// Used by nn::DistributedDataParallel to overlap gradient reduction with
// backward. Records an `all_reduce {async = true}` node when traced; a
// compiled step waits for it before the first op that reads its result, and
// before the step returns.
Work all_reduce_async(const Tensor& x, ReduceOp op = ReduceOp::kAvg,
                      int64_t bucket = -1);
// Waits for every collective this process has started.
void wait_all();

// Counters for tests and reports.
struct Stats {
  int64_t collectives = 0;  // completed
  int64_t bytes = 0;        // payload bytes reduced/broadcast/gathered
  double busy_seconds = 0;  // time the communication thread spent in MPI
  double wait_seconds = 0;  // time callers blocked waiting for results
};
Stats stats();

}  // namespace stepjit::dist

#endif  // STEPJIT_DIST_DIST_H_
