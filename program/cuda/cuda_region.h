// A fusion region as the CUDA backend compiles it: CUDA C from the emitter
// (codegen/cuda/cuda_emitter.h), compiled by NVRTC and loaded as one module,
// launched on the current stream; and the CUDA C/PTX dumps of regions.
#ifndef STEPJIT_PROGRAM_CUDA_CUDA_REGION_H_
#define STEPJIT_PROGRAM_CUDA_CUDA_REGION_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "devices/cuda/ops.h"
#include "ir/graph.h"
#include "program/program_options.h"
#include "program/region_backend.h"

namespace stepjit::runtime::cuda {

class CudaRegion final : public CompiledRegion {
 public:
  CudaRegion(std::string name, std::shared_ptr<const LoadedRegion> loaded,
             std::vector<int> return_alias);

  // On the current stream, over operands on the factory device.
  std::optional<std::vector<Tensor>> Launch(const ir::Graph& body,
                                            std::vector<Tensor>& in) override;
  std::string label() const override;

  const LoadedRegion& loaded() const { return *loaded_; }
  const std::vector<int>& return_alias() const { return return_alias_; }

 private:
  std::string name_;  // the region's callee
  std::shared_ptr<const LoadedRegion> loaded_;
  std::vector<int> return_alias_;
};

// The top-level fusion nodes the CUDA backend compiled, and their regions.
using CudaRegions = absl::flat_hash_map<const ir::Node*, const CudaRegion*>;

// Emits `region.body` for blocks of `block` threads (shape-generic: taking
// its sizes at run time, sharing its module with the same body at other
// sizes) and loads it: Unimplemented when the emitter does not lower it;
// other errors (an NVRTC failure) are real failures.
absl::StatusOr<std::unique_ptr<CudaRegion>> CompileCudaRegion(
    const RegionToCompile& region, int block, bool shape_generic = false);

// The CUDA C (and, with options.cuda_ptx_arch, PTX) of every region the
// CUDA emitter lowers, written to options.dump_dir when it is set and the
// program is on CUDA or options.dump_cuda asks. A region the emitter does
// not lower, or a failed write or compile, is reported on stderr and does
// not stop the program's build.
void DumpCudaRegionSources(const ir::Graph& graph,
                           const ProgramOptions& options);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_PROGRAM_CUDA_CUDA_REGION_H_
