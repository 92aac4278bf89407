// The MPI calls of the dist runtime. Every function runs on the
// communication thread (runtime/dist/dist.cc), which owns MPI; without MPI
// in the build they return FailedPrecondition.
#ifndef STEPJIT_RUNTIME_DIST_MPI_H_
#define STEPJIT_RUNTIME_DIST_MPI_H_

#include <cstdint>

#include "absl/status/status.h"
#include "ir/dtype.h"
#include "runtime/dist/dist.h"

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
void MpiFinalize();
// Ends every process of the job (after a failed collective that may have
// left peers waiting forever).
void MpiAbort(int code);
// The MPI library's version line ("Open MPI v4.1.4, ...").
const char* MpiLibraryVersion();

}  // namespace stepjit::dist::internal

#endif  // STEPJIT_RUNTIME_DIST_MPI_H_
