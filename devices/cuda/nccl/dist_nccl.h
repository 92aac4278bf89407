// How dist collectives of CUDA tensors run, and the process's NCCL
// communicator for them.
//
// The path is chosen per call from the CUDA backend, the dist world and
// STEPJIT_DIST_NCCL (auto, force, off):
//   local        a world of one (auto): a device copy; the result is the
//                input, as on the CPU, and CUDA graphs capture it.
//   nccl         a real device and NCCL loaded: NCCL on the current stream,
//                capturable into CUDA graphs.
//   host staging otherwise (the host emulator, NCCL missing, or
//                STEPJIT_DIST_NCCL=off): operands copied to the host, the
//                core's CPU collective (MPI), the result copied back. It
//                synchronizes, so a compiled step containing it is not
//                captured into a CUDA graph (the reason is recorded).
// STEPJIT_DIST_NCCL=force takes NCCL even in a world of one and fails
// clearly when it cannot; off never takes NCCL and stages even a world of
// one through the host (which is what the emulator tests use).
#ifndef STEPJIT_DEVICES_CUDA_NCCL_DIST_NCCL_H_
#define STEPJIT_DEVICES_CUDA_NCCL_DIST_NCCL_H_

#include <string>

#include "devices/cuda/nccl/nccl_comm.h"

namespace stepjit::runtime::cuda {

enum class CollectivePath { kLocal, kNccl, kHostStaging };
const char* CollectivePathName(
    CollectivePath path);  // "local", "nccl", "host staging"

struct CollectiveChoice {
  CollectivePath path = CollectivePath::kLocal;
  // Why not NCCL, for people (empty for kNccl): "the CUDA backend is the
  // host emulator", the loader's error, "STEPJIT_DIST_NCCL=off", ...
  std::string why_not_nccl;
};
// The path collectives of CUDA tensors take now. Throws stepjit::Error for
// STEPJIT_DIST_NCCL=force when NCCL cannot run (naming why), and for a
// value of STEPJIT_DIST_NCCL other than auto, force, on, off, 1, 0.
CollectiveChoice ChooseCollectivePath();

// The communicator of this process's dist world on the backend's device,
// created on first use (every rank reaches its first CUDA collective in the
// same order, so they create it together): rank 0 makes the unique id and
// it reaches the others over MPI (a broadcast through the dist core) or,
// for ranks launched without MPI, through the init file
// (InitOptions::init_file or STEPJIT_DIST_INIT_FILE). A new CUDA backend
// gets a new communicator. Throws stepjit::Error naming what failed.
NcclComm& DistNcclComm();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_NCCL_DIST_NCCL_H_
