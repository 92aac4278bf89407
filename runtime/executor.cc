// Program: builds a graph's regions through its device's backend and runs
// the replay loop under that backend's run hooks.
#include "runtime/executor.h"

#include <utility>

#include "ir/status.h"
#include "runtime/testing_hooks.h"

namespace stepjit::runtime {

Program::Program(Program&&) noexcept = default;
Program& Program::operator=(Program&&) noexcept = default;
Program::~Program() = default;

absl::StatusOr<Program> Program::Build(const ir::Graph& graph,
                                       ProgramOptions options) {
  Program p(&graph);
  p.options_ = options;
  DumpRegionSources(graph, options);
  p.last_uses_ = CollectLastUses(graph);
  ASSIGN_OR_RETURN(p.backend_, MakeRegionBackend(graph, options));
  for (const auto& n : graph.nodes()) {
    if (n->kind() != ir::NodeKind::kFusion) continue;
    if (!options.codegen) {
      p.interpreted_.push_back({n->body()->name(), "code generation is off"});
      continue;
    }
    // Test-only (runtime/testing_hooks.h): a wrong kernel, never cached.
    const std::unique_ptr<ir::Graph> miscompiled =
        MiscompiledBodyForTesting(graph, *n);
    absl::StatusOr<std::unique_ptr<CompiledRegion>> region =
        p.backend_->Compile(
            {.node = n.get(),
             .body = miscompiled ? miscompiled.get() : n->body(),
             .cacheable = miscompiled == nullptr});
    if (region.ok()) {
      p.regions_[n.get()] = *std::move(region);
    } else if (absl::IsUnimplemented(region.status())) {
      p.interpreted_.push_back(
          {n->body()->name(), std::string(region.status().message())});
    } else {
      return region
          .status();  // a real code generation failure: the caller falls back
    }
  }
  p.backend_->FinishBuild();
  // A multi-region launch replaces its members' launches.
  p.kernels_per_run_ =
      CountKernels(graph) - p.stats().grouped_regions + p.stats().region_groups;
  return p;
}

ReplayPlan Program::Plan() const {
  return {.graph = graph_,
          .last_uses = &last_uses_,
          .regions = &regions_,
          .backend = backend_.get()};
}

std::vector<Tensor> Program::Run(absl::Span<const Tensor> inputs,
                                 absl::Span<const Tensor> state) const {
  const ReplayPlan plan = Plan();
  return backend_->Run(
      inputs, state,
      [&plan](absl::Span<const Tensor> in, absl::Span<const Tensor> st,
              const RunHooks& hooks) {
        return RunReplay(plan, in, st, hooks);
      });
}

std::vector<Tensor> Program::RunChecked(
    absl::Span<const Tensor> inputs, absl::Span<const Tensor> state,
    std::vector<RegionMismatch>* mismatches) const {
  RegionChecker checker(*graph_);
  const ReplayPlan plan = Plan();
  std::vector<Tensor> out = backend_->RunUncaptured(
      inputs, state,
      [&plan, &checker](absl::Span<const Tensor> in,
                        absl::Span<const Tensor> st, const RunHooks& hooks) {
        return RunReplay(plan, in, st, hooks, &checker);
      });
  *mismatches = checker.Take();
  return out;
}

}  // namespace stepjit::runtime
