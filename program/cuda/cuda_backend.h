// The CUDA region backend (program/region_backend.h): fusion regions
// as NVRTC kernels (cuda_region.h), consecutive independent regions launched
// together (region_groups.h), every run queued on the program's own stream
// and, from the third run on, replayed from a captured CUDA graph
// (cuda_graph.h).
#ifndef STEPJIT_PROGRAM_CUDA_CUDA_BACKEND_H_
#define STEPJIT_PROGRAM_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "program/cuda/cuda_region.h"
#include "program/program_options.h"
#include "program/region_backend.h"

namespace stepjit::runtime::cuda {

// The backend of a program on options.device (a CUDA device): an error when
// no CUDA backend (driver or emulator) is available.
absl::StatusOr<std::unique_ptr<RegionBackend>> MakeCudaRegionBackend(
    const ir::Graph& graph, const ProgramOptions& options);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_PROGRAM_CUDA_CUDA_BACKEND_H_
