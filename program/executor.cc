// Program: builds a graph's regions through its device's backend and runs
// the replay loop under that backend's run hooks.
#include "program/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

#include "ir/status.h"
#include "program/region_override.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "runtime/thread_pool.h"

namespace stepjit::runtime {

Program::Program(Program&&) noexcept = default;
Program& Program::operator=(Program&&) noexcept = default;
Program::~Program() = default;

absl::StatusOr<Program> Program::Build(const ir::Graph& graph,
                                       ProgramOptions options) {
  Program p(&graph);
  p.options_ = options;
  DumpRegionSources(graph, options);
  p.launches_ = PrepareLaunches(graph, options.device);
  p.random_layout_ =
      options.random_layout.span > 0 ? options.random_layout : LayoutOf(graph);
  ASSIGN_OR_RETURN(p.backend_, MakeRegionBackend(graph, options));
  std::vector<const ir::Node*> fusions;
  for (const auto& n : graph.nodes()) {
    if (n->kind() == ir::NodeKind::kFusion) fusions.push_back(n.get());
  }
  // Test support (program/region_override.h): a wrong kernel, never
  // cached.
  std::vector<std::unique_ptr<ir::Graph>> miscompiled(fusions.size());
  for (size_t i = 0; i < fusions.size() && options.codegen; ++i)
    miscompiled[i] = OverriddenRegionBody(graph, *fusions[i]);
  std::vector<absl::StatusOr<std::unique_ptr<CompiledRegion>>> compiled;
  for (size_t i = 0; i < fusions.size(); ++i)
    compiled.emplace_back(absl::UnimplementedError("code generation is off"));
  auto compile = [&](size_t i) {
    compiled[i] = p.backend_->Compile(
        {.node = fusions[i],
         .body = miscompiled[i] ? miscompiled[i].get() : fusions[i]->body(),
         .cacheable = miscompiled[i] == nullptr});
  };
  const auto codegen_start = std::chrono::steady_clock::now();
  if (options.codegen) {
    if (p.backend_->ConcurrentCompile()) {
      // Regions compile independently: each thread takes the next one
      // (their costs differ widely, so no fixed split).
      std::atomic<size_t> next{0};
      const int64_t workers =
          std::min<int64_t>(NumThreads(), static_cast<int64_t>(fusions.size()));
      ParallelFor(workers, 1, [&](int64_t, int64_t) {
        for (size_t i = next++; i < fusions.size(); i = next++) compile(i);
      });
    } else {
      for (size_t i = 0; i < fusions.size(); ++i) compile(i);
    }
  }
  p.codegen_wall_ms_ = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - codegen_start)
                           .count();
  for (size_t i = 0; i < fusions.size(); ++i) {
    const ir::Node* n = fusions[i];
    absl::StatusOr<std::unique_ptr<CompiledRegion>>& region = compiled[i];
    if (region.ok()) {
      p.regions_[n] = *std::move(region);
    } else if (absl::IsUnimplemented(region.status())) {
      p.interpreted_.push_back(
          {n->body()->name(), std::string(region.status().message())});
    } else {
      return region
          .status();  // a real code generation failure: the caller falls back
    }
  }
  p.backend_->FinishBuild();
  if (options.device.is_cpu() && NumThreads() > 1 && AdaptiveThreads())
    p.tuner_ = std::make_unique<TeamTuner>(NumThreads());
  // A multi-region launch replaces its members' launches.
  p.kernels_per_run_ =
      CountKernels(graph) - p.stats().grouped_regions + p.stats().region_groups;
  return p;
}

std::vector<RegionCompileTime> Program::region_compile_times() const {
  std::vector<RegionCompileTime> t = stats().region_times;
  std::stable_sort(t.begin(), t.end(),
                   [](const RegionCompileTime& a, const RegionCompileTime& b) {
                     return a.ms > b.ms;
                   });
  return t;
}

ReplayPlan Program::Plan() const {
  return {.graph = graph_,
          .launches = &launches_,
          .regions = &regions_,
          .backend = backend_.get(),
          .device = options_.device,
          .random_layout = random_layout_};
}

std::vector<Tensor> Program::WithRandomState(
    absl::Span<const Tensor> inputs) const {
  std::vector<Tensor> all(inputs.begin(), inputs.end());
  if (graph_->random_state() == nullptr) return all;
  // This run's draws: the span the eager step reserved, reserved now from
  // the default generator (under its current seed: manual_seed between
  // calls changes them as it changes eager's), each random op at its traced
  // place in it.
  Generator& g = default_generator();
  const uint64_t base =
      random_layout_.span > 0
          ? g.Reserve(static_cast<uint64_t>(random_layout_.span))
          : g.offset();
  Tensor host = empty({2}, {.dtype = DType::kI64});
  host.data<int64_t>()[0] = static_cast<int64_t>(g.seed());
  host.data<int64_t>()[1] =
      static_cast<int64_t>(base - static_cast<uint64_t>(random_layout_.first));
  all.push_back(options_.device.is_cpu() ? host : host.to(options_.device));
  return all;
}

std::vector<Tensor> Program::Run(absl::Span<const Tensor> inputs_in,
                                 absl::Span<const Tensor> state) const {
  const ReplayPlan plan = Plan();
  const std::vector<Tensor> inputs = WithRandomState(inputs_in);
  auto run = [&] {
    return backend_->Run(
        inputs, state,
        [&plan](absl::Span<const Tensor> in, absl::Span<const Tensor> st,
                const RunHooks& hooks) {
          return RunReplay(plan, in, st, hooks);
        });
  };
  if (tuner_ == nullptr) return run();
  const int team = tuner_->Next();
  const auto start = std::chrono::steady_clock::now();
  std::vector<Tensor> out;
  {
    TeamScope scope(team);
    out = run();
  }
  tuner_->Record(team, std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - start)
                           .count());
  return out;
}

std::vector<Tensor> Program::RunChecked(
    absl::Span<const Tensor> inputs, absl::Span<const Tensor> state,
    std::vector<RegionMismatch>* mismatches) const {
  RegionChecker checker(*graph_);
  const ReplayPlan plan = Plan();
  std::vector<Tensor> out = backend_->RunUncaptured(
      WithRandomState(inputs), state,
      [&plan, &checker](absl::Span<const Tensor> in,
                        absl::Span<const Tensor> st, const RunHooks& hooks) {
        return RunReplay(plan, in, st, hooks, &checker);
      });
  *mismatches = checker.Take();
  return out;
}

}  // namespace stepjit::runtime
