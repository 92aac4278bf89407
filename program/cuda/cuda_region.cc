// CUDA regions: NVRTC modules launched over bound operands, and their dumps.
#include "program/cuda/cuda_region.h"

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/dump.h"
#include "devices/cuda/backend.h"
#include "ir/status.h"
#include "program/region_operands.h"
#include "runtime/dispatch.h"

namespace stepjit::runtime::cuda {

CudaRegion::CudaRegion(std::string name,
                       std::shared_ptr<const LoadedRegion> loaded,
                       std::vector<int> return_alias)
    : name_(std::move(name)),
      loaded_(std::move(loaded)),
      return_alias_(std::move(return_alias)) {}

std::optional<std::vector<Tensor>> CudaRegion::Launch(const ir::Graph& body,
                                                      std::vector<Tensor>& in) {
  return RunGenerated(
      body, return_alias_, FactoryDevice(), in, [&](std::vector<void*> ptrs) {
        ThrowIfError(LaunchRegion(*loaded_, ptrs, CurrentStream()));
      });
}

std::string CudaRegion::label() const { return absl::StrCat(name_, "(cuda)"); }

absl::StatusOr<std::unique_ptr<CudaRegion>> CompileCudaRegion(
    const RegionToCompile& region, int block, bool shape_generic) {
  ASSIGN_OR_RETURN(
      codegen::cuda::RegionSource src,
      codegen::cuda::EmitRegion(
          *region.body, {.block = block, .shape_generic = shape_generic}));
  ASSIGN_OR_RETURN(std::shared_ptr<const LoadedRegion> loaded, LoadRegion(src));
  return std::make_unique<CudaRegion>(region.node->body()->name(),
                                      std::move(loaded),
                                      ReturnAliases(*region.node->body()));
}

void DumpCudaRegionSources(const ir::Graph& graph,
                           const ProgramOptions& options) {
  // A step on CUDA always dumps the CUDA C of its kernels.
  if (options.dump_dir.empty() ||
      !(options.dump_cuda || options.device.is_cuda())) {
    return;
  }
  codegen::cuda::NvrtcOptions nvrtc{.arch = options.cuda_ptx_arch,
                                    .want_ptx = true};
  for (const auto& n : graph.nodes()) {
    if (n->kind() != ir::NodeKind::kFusion) continue;
    absl::StatusOr<codegen::cuda::RegionSource> region =
        codegen::cuda::EmitRegion(*n->body());
    if (!region.ok()) {
      if (!absl::IsUnimplemented(region.status())) {
        std::cerr << "stepjit: STEPJIT_DUMP_CUDA: " << n->body()->name() << ": "
                  << region.status().message() << "\n";
      }
      continue;
    }
    absl::Status st = codegen::cuda::DumpRegion(
        options.dump_dir, *region,
        options.cuda_ptx_arch.empty() ? nullptr : &nvrtc);
    if (!st.ok())
      std::cerr << "stepjit: STEPJIT_DUMP_CUDA: " << st.message() << "\n";
  }
}

}  // namespace stepjit::runtime::cuda
