// What other parts of the runtime (device kernels, NCCL) share with the
// dist core.
#ifndef STEPJIT_DIST_DIST_INTERNAL_H_
#define STEPJIT_DIST_DIST_INTERNAL_H_

#include <cstddef>
#include <string>

#include "dist/dist.h"
#include "ir/op.h"
#include "runtime/dispatch.h"

namespace stepjit::dist::internal {

// Throws unless collectives can run now: initialized, not shut down, and no
// earlier collective failed.
void CheckUsable(ir::OpId op);
// Whether host (CPU) collectives reach every rank: a world of one, or MPI.
bool CanRunOnHost();
// Why they cannot (a torchrun launch without MPI), for an error message.
std::string HostCollectivesUnavailable(ir::OpId op);
// The CPU kernel of every collective op (through MPI on the communication
// thread; a world of one copies). With `async = true` the result is
// registered pending (runtime/pending.h) instead of waited for.
void RunHostCollective(const runtime::KernelArgs& k);

// For NCCL's setup (devices/cuda/nccl/dist_nccl.h): whether MPI joins the
// ranks; InitOptions::init_file as init() got it (may be empty); and rank
// `root`'s `bytes` at `data` copied into every rank's `data` by an MPI
// broadcast on the communication thread (throws stepjit::Error naming the
// failure or the timeout, as a collective does).
bool HasMpi();
std::string InitFile();
void BroadcastBytes(void* data, size_t bytes, int root);
// A collective outside the communication thread (NCCL) failed: healthy()
// turns false and later collectives throw `message`.
void MarkFailed(const std::string& message);

}  // namespace stepjit::dist::internal

#endif  // STEPJIT_DIST_DIST_INTERNAL_H_
