// Grouping consecutive independent regions for multi-region launches, and
// launching a group.
#include "program/cuda/region_groups.h"

#include <iostream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "codegen/cuda/dump.h"
#include "codegen/cuda/multi_region.h"
#include "devices/cuda/backend.h"
#include "devices/cuda/ops.h"
#include "program/region_operands.h"
#include "program/region_override.h"
#include "runtime/dispatch.h"

namespace stepjit::runtime::cuda {

std::vector<std::vector<const ir::Node*>> IndependentRegionRuns(
    const ir::Graph& g,
    const absl::flat_hash_map<const ir::Node*, int64_t>& arg_bytes,
    int64_t max_arg_bytes) {
  std::vector<std::vector<const ir::Node*>> runs;
  std::vector<const ir::Node*> run;
  absl::flat_hash_set<const ir::Value*> produced;  // by the run's members
  int64_t bytes = 0;
  auto close = [&] {
    if (run.size() >= 2) runs.push_back(run);
    run.clear();
    produced.clear();
    bytes = 0;
  };
  for (const auto& n : g.nodes()) {
    auto it = arg_bytes.find(n.get());
    if (it == arg_bytes.end()) {
      close();
      continue;
    }
    bool joins = bytes + it->second <= max_arg_bytes;
    for (const ir::Value* v : n->inputs()) joins &= !produced.contains(v);
    if (!joins) close();
    run.push_back(n.get());
    bytes += it->second;
    for (const ir::Value* v : n->outputs()) produced.insert(v);
  }
  close();
  return runs;
}

std::vector<std::shared_ptr<const RegionGroup>> BuildRegionGroups(
    const ir::Graph& graph, const CudaRegions& compiled, int block,
    const std::string& dump_dir, const std::string& ptx_arch) {
  absl::flat_hash_map<const ir::Node*, int64_t> arg_bytes;
  for (const auto& [node, region] : compiled)
    arg_bytes[node] = codegen::cuda::MultiArgBytes(region->loaded().source);
  std::vector<std::shared_ptr<const RegionGroup>> groups;
  for (const std::vector<const ir::Node*>& run : IndependentRegionRuns(
           graph, arg_bytes, codegen::cuda::kMaxMultiArgBytes)) {
    std::vector<const ir::Graph*> bodies;
    // Test support, as for each region (program/region_override.h).
    std::vector<std::unique_ptr<ir::Graph>> miscompiled;
    for (const ir::Node* n : run) {
      miscompiled.push_back(OverriddenRegionBody(graph, *n));
      bodies.push_back(miscompiled.back() ? miscompiled.back().get()
                                          : n->body());
    }
    absl::StatusOr<codegen::cuda::MultiRegionSource> src =
        codegen::cuda::EmitMultiRegion(bodies, {.block = block});
    if (!src.ok()) continue;
    if (!dump_dir.empty()) {
      const codegen::cuda::NvrtcOptions ptx{.arch = ptx_arch, .want_ptx = true};
      absl::Status st = codegen::cuda::DumpRegion(
          dump_dir, src->combined, ptx_arch.empty() ? nullptr : &ptx);
      if (!st.ok())
        std::cerr << "stepjit: STEPJIT_DUMP: " << st.message() << "\n";
    }
    absl::StatusOr<std::shared_ptr<const LoadedRegion>> module =
        LoadRegion(src->combined);
    if (!module.ok()) continue;
    auto group = std::make_shared<RegionGroup>();
    group->members = run;
    for (const ir::Node* n : run) group->regions.push_back(compiled.at(n));
    group->module = *std::move(module);
    group->layouts = std::move(src->members);
    groups.push_back(std::move(group));
  }
  return groups;
}

std::optional<std::vector<std::vector<Tensor>>> LaunchRegionGroup(
    const RegionGroup& group, std::vector<std::vector<Tensor>>& ins) {
  const Device device = FactoryDevice();
  std::vector<GeneratedOperands> ops;
  for (size_t m = 0; m < group.members.size(); ++m) {
    std::optional<GeneratedOperands> bound =
        BindGenerated(*group.members[m]->body(),
                      group.regions[m]->return_alias(), device, ins[m]);
    if (!bound) return std::nullopt;
    ops.push_back(*std::move(bound));
  }
  // Members run concurrently: a buffer one writes in place must be no other
  // member's operand or result.
  for (size_t m = 0; m < ops.size(); ++m) {
    const std::vector<int>& alias = group.regions[m]->return_alias();
    for (size_t r = 0; r < ops[m].out.size(); ++r) {
      if (alias[r] < 0 || !ops[m].out[r].is_same(ins[m][alias[r]])) continue;
      const auto& written = ops[m].out[r].storage();
      for (size_t o = 0; o < ops.size(); ++o) {
        if (o == m) continue;
        for (const Tensor& t : ins[o])
          if (t.storage() == written) return std::nullopt;
        for (const Tensor& t : ops[o].out)
          if (t.storage() == written) return std::nullopt;
      }
    }
  }
  std::vector<std::vector<void*>> ptrs;
  for (GeneratedOperands& o : ops) ptrs.push_back(o.ptrs);
  ThrowIfError(
      LaunchMultiRegion(*group.module, group.layouts, ptrs, CurrentStream()));
  std::vector<std::vector<Tensor>> outs;
  for (size_t m = 0; m < group.members.size(); ++m) {
    FinishGenerated(group.regions[m]->return_alias(), ins[m], ops[m].out);
    outs.push_back(std::move(ops[m].out));
  }
  return outs;
}

}  // namespace stepjit::runtime::cuda
