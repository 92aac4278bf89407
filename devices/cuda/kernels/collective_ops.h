// The CUDA kernels of the collective ops (all_reduce, broadcast,
// all_gather, barrier): a device copy in a world of one, NCCL on a real
// device, else host staging through the dist core's CPU collective
// (devices/cuda/nccl/dist_nccl.h says which and why).
//
// all_reduce {async = true} needs no pending registration on the NCCL and
// local paths: the work is queued on the current stream, so whatever reads
// the result on that stream runs after it, and the host is not held up
// meanwhile. Host staging runs it synchronously.
#ifndef STEPJIT_DEVICES_CUDA_KERNELS_COLLECTIVE_OPS_H_
#define STEPJIT_DEVICES_CUDA_KERNELS_COLLECTIVE_OPS_H_

#include <string>

#include "devices/cuda/ops.h"
#include "ir/graph.h"

namespace stepjit::runtime::cuda {

// Sets the device paths of the collective ops.
void AddCollectivePaths(DevicePaths& paths);

// Why a CUDA graph cannot capture collective node `op` now ("" when it can:
// the local and NCCL paths).
std::string CollectiveNotCapturable(ir::OpId op);

// How many collectives of CUDA tensors took each path in this process.
struct CollectiveStats {
  int64_t local = 0;
  int64_t nccl = 0;
  int64_t host_staged = 0;
};
CollectiveStats GetCollectiveStats();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_KERNELS_COLLECTIVE_OPS_H_
