// NCCL's unique id passed between ranks through a shared file, for ranks
// launched without MPI (torchrun's RANK / WORLD_SIZE): rank 0 writes the
// 128 bytes, the others wait for the file and read them.
//
// The write is atomic (a temporary file in the same directory, renamed
// over the path), so a reader sees no file or the whole id, never part of
// it. Rank 0 removes the file once the communicator exists (every rank has
// read it by then, ncclCommInitRank being collective), so the next job on
// the same path does not read a stale id.
#ifndef STEPJIT_DEVICES_CUDA_NCCL_UNIQUE_ID_FILE_H_
#define STEPJIT_DEVICES_CUDA_NCCL_UNIQUE_ID_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "devices/cuda/nccl/nccl_api.h"

namespace stepjit::runtime::cuda {

// Writes `id` to `path` (mode 0600) through a temporary file and rename.
// An error names the path and what failed.
absl::Status WriteUniqueIdFile(const std::string& path,
                               const nccl::UniqueId& id);

// Waits up to `timeout_s` seconds for `path` to appear and returns the id in
// it. DeadlineExceeded naming the path, the rank and the timeout when it
// never appears; InvalidArgument when it holds something other than 128
// bytes.
absl::StatusOr<nccl::UniqueId> ReadUniqueIdFile(const std::string& path,
                                                double timeout_s, int rank);

// The file init_file names: `init_file` when set, else
// $STEPJIT_DIST_INIT_FILE; a "file://" prefix (torch's init_method) is
// accepted. Empty when neither is set.
std::string UniqueIdFilePath(const std::string& init_file);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_NCCL_UNIQUE_ID_FILE_H_
