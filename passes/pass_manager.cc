// The pass table and the pipeline runner: verify, dump and count per pass.
#include "passes/pass_manager.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ir/printer.h"
#include "ir/status.h"
#include "ir/verifier.h"
#include "passes/autocast.h"
#include "passes/canonicalize.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/fuse.h"
#include "passes/gemm_bgrad.h"
#include "passes/grad_scaler.h"
#include "passes/memory_plan.h"
#include "passes/sink_regions.h"

namespace stepjit::passes {
namespace {

absl::StatusOr<bool> RunVerify(ir::Graph& graph, PassStats&) {
  absl::Status status = ir::Verify(graph);
  if (!status.ok()) return status;
  return false;
}

absl::StatusOr<bool> RunPrint(ir::Graph& graph, PassStats&) {
  ir::Print(graph, std::cerr);
  return false;
}

// The one list of passes. Add a pass here: {"name", &Entry, "summary"}.
constexpr PassInfo kPasses[] = {
    {"verify", &RunVerify, "check the IR's invariants (ir/verifier.h)"},
    {"print", &RunPrint,
     "print the IR at this point of the pipeline to stderr"},
    {"canonicalize", &Canonicalize,
     "fold constants, drop no-op casts/views, simplify x*1, x+0"},
    {"cse", &EliminateCommonSubexpressions,
     "merge identical pure op nodes (hash-consing)"},
    {"dce", &EliminateDeadCode,
     "remove nodes whose results are unused (never state writes)"},
    {"fuse", &Fuse,
     "group elementwise chains, reductions and optimizer updates into regions"},
    {"gemm-bgrad", &GemmBiasGradPass,
     "after fuse: a marked weight-gradient matmul also computes its bias "
     "gradient (CUDA steps)"},
    {"sink-regions", &SinkRegions,
     "move regions next to their first user so independent ones sit together"},
    {"memory-plan", &PlanMemoryPass,
     "decide in-place updates by liveness; report planned peak bytes"},
    {"autocast-bf16", &AutocastBf16,
     "cast matmul inputs to bf16 and f32-policy op inputs to f32 (amp::Autocast's policy)"},
    {"autocast-f16", &AutocastF16, "the same with f16"},
    {"grad-scaler", &InsertGradScaler,
     "dynamic loss scaling: scaled seed, unscaled grads, found_inf, predicated update"},
};

std::string KnownPasses(absl::Span<const PassInfo> registry) {
  std::vector<absl::string_view> names;
  for (const PassInfo& p : registry) names.push_back(p.name);
  return absl::StrJoin(names, ", ");
}

const PassInfo* FindIn(absl::Span<const PassInfo> registry,
                       absl::string_view name) {
  for (const PassInfo& p : registry) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::vector<absl::string_view> SplitNames(absl::string_view list) {
  std::vector<absl::string_view> names;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

absl::Status WriteDump(const std::string& dir, int position,
                       absl::string_view pass, const ir::Graph& graph) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = absl::StrCat(
      dir, "/", absl::StrFormat("%03d", position), "-", pass, ".ir");
  std::ofstream out(path, std::ios::binary);
  ir::Print(graph, out);
  out.close();
  if (!out) {
    return absl::InternalError(
        absl::StrCat("cannot write IR dump '", path, "' (STEPJIT_DUMP)"));
  }
  return absl::OkStatus();
}

}  // namespace

void PassStats::Add(absl::string_view counter, int64_t n) {
  auto it = counters.find(counter);
  if (it == counters.end()) {
    counters.emplace(std::string(counter), n);
  } else {
    it->second += n;
  }
}

int64_t PassStats::Get(absl::string_view counter) const {
  auto it = counters.find(counter);
  return it == counters.end() ? 0 : it->second;
}

PassStats& PipelineStats::For(absl::string_view pass) {
  for (auto& [name, stats] : passes) {
    if (name == pass) return stats;
  }
  passes.emplace_back(std::string(pass), PassStats());
  return passes.back().second;
}

const PassStats* PipelineStats::Find(absl::string_view pass) const {
  for (const auto& [name, stats] : passes) {
    if (name == pass) return &stats;
  }
  return nullptr;
}

std::string PipelineStats::ToString() const {
  std::string out;
  for (const auto& [name, s] : passes) {
    absl::StrAppend(&out, name, ": runs=", s.runs, " changed=", s.changed);
    if (s.skipped > 0) absl::StrAppend(&out, " skipped=", s.skipped);
    if (s.runs > 0) {
      absl::StrAppend(&out, " nodes=", s.nodes_before, "->", s.nodes_after);
    }
    for (const auto& [counter, n] : s.counters) {
      absl::StrAppend(&out, " ", counter, "=", n);
    }
    out += "\n";
  }
  return out;
}

ir::Value* ValueReplacer::Resolve(ir::Value* v) const {
  for (auto it = map_.find(v); it != map_.end(); it = map_.find(v)) {
    v = it->second;
  }
  return v;
}

bool ValueReplacer::ApplyTo(ir::Node& node) const {
  if (map_.empty()) return false;
  bool changed = false;
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    ir::Value* to = Resolve(node.inputs()[i]);
    if (to != node.inputs()[i]) {
      node.ReplaceInput(static_cast<int>(i), to);
      changed = true;
    }
  }
  return changed;
}

bool ValueReplacer::ApplyToReturns(ir::Graph& graph) const {
  if (map_.empty()) return false;
  std::vector<ir::Value*> returns = graph.returns();
  bool changed = false;
  for (ir::Value*& v : returns) {
    ir::Value* to = Resolve(v);
    changed |= to != v;
    v = to;
  }
  if (changed) graph.SetReturns(std::move(returns));
  return changed;
}

std::vector<PassInfo> ListPasses() {
  return std::vector<PassInfo>(std::begin(kPasses), std::end(kPasses));
}

const PassInfo* FindPass(absl::string_view name) {
  return FindIn(kPasses, name);
}

std::string PipelineForTarget(absl::string_view pipeline, Target target) {
  std::vector<std::string> names = absl::StrSplit(pipeline, ',');
  int last_fuse = -1;
  for (size_t i = 0; i < names.size(); ++i) {
    const absl::string_view name = absl::StripAsciiWhitespace(names[i]);
    if (name == "gemm-bgrad") return std::string(pipeline);
    if (name == "fuse") last_fuse = static_cast<int>(i);
  }
  if (target != Target::kCuda || last_fuse < 0) return std::string(pipeline);
  names.insert(names.begin() + last_fuse + 1, "gemm-bgrad");
  return absl::StrJoin(names, ",");
}

PipelineOptions FromEnvironment() {
  PipelineOptions options;
  if (const char* dump = std::getenv("STEPJIT_DUMP"); dump != nullptr) {
    options.dump_dir = dump;
  }
  if (const char* off = std::getenv("STEPJIT_DISABLE"); off != nullptr) {
    for (absl::string_view name : SplitNames(off)) {
      options.disabled.emplace_back(name);
    }
  }
  return options;
}

absl::StatusOr<std::vector<const PassInfo*>> ParsePipeline(
    absl::string_view pipeline, absl::Span<const PassInfo> registry) {
  std::vector<const PassInfo*> passes;
  for (absl::string_view name : SplitNames(pipeline)) {
    const PassInfo* pass = FindIn(registry, name);
    if (pass == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown pass '", name, "'; known passes: ", KnownPasses(registry)));
    }
    passes.push_back(pass);
  }
  return passes;
}

absl::StatusOr<std::vector<const PassInfo*>> ParsePipeline(
    absl::string_view pipeline) {
  return ParsePipeline(pipeline, kPasses);
}

absl::Status RunPipeline(ir::Graph& graph, absl::string_view pipeline,
                         const PipelineOptions& options, PipelineStats* stats) {
  return RunPipeline(graph, pipeline, options, stats, kPasses);
}

absl::Status RunPipeline(ir::Graph& graph, absl::string_view pipeline,
                         const PipelineOptions& options, PipelineStats* stats,
                         absl::Span<const PassInfo> registry) {
  ASSIGN_OR_RETURN(std::vector<const PassInfo*> passes,
                   ParsePipeline(pipeline, registry));
  for (const std::string& name : options.disabled) {
    if (FindIn(registry, name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown pass '", name,
          "' in the disabled list (STEPJIT_DISABLE); known passes: ",
          KnownPasses(registry)));
    }
  }
  PipelineStats local;
  if (stats == nullptr) stats = &local;
  for (size_t i = 0; i < passes.size(); ++i) {
    const PassInfo& pass = *passes[i];
    PassStats& s = stats->For(pass.name);
    if (absl::c_linear_search(options.disabled, pass.name)) {
      ++s.skipped;
      continue;
    }
    ++s.runs;
    s.nodes_before += static_cast<int64_t>(graph.nodes().size());
    absl::StatusOr<bool> changed = pass.run(graph, s);
    if (!changed.ok()) {
      return absl::Status(
          changed.status().code(),
          absl::StrCat("pass `", pass.name, "`: ", changed.status().message()));
    }
    s.changed += *changed ? 1 : 0;
    s.nodes_after += static_cast<int64_t>(graph.nodes().size());
    if (options.verify_each) {
      if (absl::Status v = ir::Verify(graph); !v.ok()) {
        return absl::InternalError(
            absl::StrCat("after pass `", pass.name, "`: ", v.message()));
      }
    }
    if (!options.dump_dir.empty()) {
      RETURN_IF_ERROR(WriteDump(options.dump_dir, static_cast<int>(i) + 1,
                                pass.name, graph));
    }
    if (options.after_pass) options.after_pass(pass.name, graph);
  }
  return absl::OkStatus();
}

}  // namespace stepjit::passes
