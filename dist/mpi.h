// The MPI calls of the dist runtime. Every function runs on the
// communication thread (dist/dist.cc), which owns MPI; without MPI
// in the build they return FailedPrecondition.
#ifndef STEPJIT_DIST_MPI_H_
#define STEPJIT_DIST_MPI_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "dist/dist.h"
#include "ir/dtype.h"

namespace stepjit::dist::internal {

// Whether this build links MPI.
bool MpiBuilt();
// MPI_Init_thread (serialized: only the communication thread calls MPI);
// errors come back as statuses instead of aborting.
absl::Status MpiInit(int* rank, int* size);
// Reduces `count` elements of `dtype` (f32, f64, i64, i32, bool) from
// `send` into `recv` (they may be the same buffer). kAvg sums; the caller
// divides.
absl::Status MpiAllReduce(const void* send, void* recv, int64_t count,
                          ir::DType dtype, ReduceOp op);
absl::Status MpiBroadcast(void* data, int64_t bytes, int root);
absl::Status MpiAllGather(const void* send, void* recv, int64_t bytes_per_rank);
absl::Status MpiBarrier();

// What one rank is about to do: every collective first exchanges this with
// the other ranks, so that ranks that disagree (one finished its steps, a
// different bucket size or batch) fail with a message instead of handing
// MPI mismatched buffers.
struct CollectiveHeader {
  enum Kind : int64_t {
    kAllReduce = 1,
    kBroadcast,
    kAllGather,
    kBarrier,
    kFinalize,
    kCheckSame
  };
  int64_t seq = 0;    // collectives checked so far on this rank
  int64_t kind = 0;   // Kind
  int64_t dtype = 0;  // ir::DType of all_reduce's payload (else 0)
  int64_t count = 0;  // all_reduce: elements; broadcast and all_gather: bytes
  int64_t aux = 0;    // all_reduce: the ReduceOp; broadcast: the root
};
// One small MPI_Allreduce (the maximum of each field and of its negation);
// when the ranks differ, an MPI_Allgather of every rank's header, and
// FailedPrecondition naming each rank's collective.
absl::Status MpiCheckHeader(const CollectiveHeader& header);
// Gathers every rank's `value` and returns FailedPrecondition naming each
// rank's when they differ (values are compared whole; the message shows at
// most 200 bytes of each).
absl::Status MpiCheckSame(const std::string& name, const std::string& value);
// FNV-1a of `text`: the same on every rank and build.
inline uint64_t Fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}
// "all_reduce #12 (sum) of 1000 f32 values", for messages.
std::string DescribeHeader(const CollectiveHeader& header);
void MpiFinalize();
// Ends every process of the job (after a failed collective that may have
// left peers waiting forever).
void MpiAbort(int code);
// The MPI library's version line ("Open MPI v4.1.4, ...").
const char* MpiLibraryVersion();

}  // namespace stepjit::dist::internal

#endif  // STEPJIT_DIST_MPI_H_
