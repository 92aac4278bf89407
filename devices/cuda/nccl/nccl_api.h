// The part of NCCL's C ABI stepjit calls, declared here so that no NCCL
// header is needed to build and the library is opened at run time
// (devices/cuda/nccl/nccl_library.h). Values and signatures follow NCCL's
// public API documentation (nccl.h of NCCL 2.x); nccl_library.cc checks
// them against nccl.h with static_asserts when the toolkit has the header.
//
// Only the stable subset is used: the handles, the unique id, blocking
// communicator creation (ncclCommInitRank, no ncclConfig_t, whose layout
// changes between versions), the three collectives, async-error polling,
// abort, and group calls. ncclAvg needs NCCL 2.10 or newer.
#ifndef STEPJIT_DEVICES_CUDA_NCCL_NCCL_API_H_
#define STEPJIT_DEVICES_CUDA_NCCL_NCCL_API_H_

#include <cstddef>

namespace stepjit::runtime::cuda::nccl {

// Opaque: a pointer to NCCL's communicator.
using Comm = struct NcclCommOpaque*;
// A cudaStream_t (the driver's CUstream is the same handle).
using CudaStream = void*;

// ncclUniqueId: 128 opaque bytes that rank 0 creates and every rank passes
// to ncclCommInitRank (by value).
inline constexpr size_t kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};
static_assert(sizeof(UniqueId) == 128, "ncclUniqueId is 128 bytes");

// ncclResult_t (an int-sized C enum).
using Result = int;
inline constexpr Result kSuccess = 0;
inline constexpr Result kUnhandledCudaError = 1;
inline constexpr Result kSystemError = 2;
inline constexpr Result kInternalError = 3;
inline constexpr Result kInvalidArgument = 4;
inline constexpr Result kInvalidUsage = 5;
inline constexpr Result kRemoteError = 6;  // NCCL 2.12+
inline constexpr Result kInProgress = 7;   // NCCL 2.14+ (non-blocking comms)

// ncclDataType_t.
using DataType = int;
inline constexpr DataType kInt8 = 0;
inline constexpr DataType kUint8 = 1;
inline constexpr DataType kInt32 = 2;
inline constexpr DataType kUint32 = 3;
inline constexpr DataType kInt64 = 4;
inline constexpr DataType kUint64 = 5;
inline constexpr DataType kFloat16 = 6;
inline constexpr DataType kFloat32 = 7;
inline constexpr DataType kFloat64 = 8;
inline constexpr DataType kBfloat16 = 9;  // NCCL 2.10+ with CUDA 11+

// ncclRedOp_t.
using RedOp = int;
inline constexpr RedOp kSum = 0;
inline constexpr RedOp kProd = 1;
inline constexpr RedOp kMax = 2;
inline constexpr RedOp kMin = 3;
inline constexpr RedOp kAvg = 4;  // NCCL 2.10+

// NCCL_VERSION_CODE of 2.10.0, the first with ncclAvg and ncclBfloat16
// (from 2.9 on the code is major * 10000 + minor * 100 + patch).
inline constexpr int kVersionWithAvg = 21000;

// The entry points, resolved with dlsym.
struct Api {
  Result (*GetVersion)(int* version) = nullptr;
  Result (*GetUniqueId)(UniqueId* id) = nullptr;
  Result (*CommInitRank)(Comm* comm, int nranks, UniqueId id,
                         int rank) = nullptr;
  Result (*CommDestroy)(Comm comm) = nullptr;
  Result (*CommAbort)(Comm comm) = nullptr;
  Result (*CommGetAsyncError)(Comm comm, Result* async_error) = nullptr;
  const char* (*GetErrorString)(Result result) = nullptr;
  Result (*AllReduce)(const void* send, void* recv, size_t count,
                      DataType dtype, RedOp op, Comm comm,
                      CudaStream stream) = nullptr;
  Result (*Broadcast)(const void* send, void* recv, size_t count,
                      DataType dtype, int root, Comm comm,
                      CudaStream stream) = nullptr;
  Result (*AllGather)(const void* send, void* recv, size_t send_count,
                      DataType dtype, Comm comm, CudaStream stream) = nullptr;
  Result (*GroupStart)() = nullptr;
  Result (*GroupEnd)() = nullptr;
};

}  // namespace stepjit::runtime::cuda::nccl

#endif  // STEPJIT_DEVICES_CUDA_NCCL_NCCL_API_H_
