// Specializer: amp and pass pipelines, compiler-owned state, program building
// and pass-by-pass rebuilds.
#include "frontend/specializer.h"

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "config/env.h"
#include "dist/dist.h"
#include "frontend/dot_dump.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/status.h"
#include "ir/verifier.h"
#include "passes/amp_weight_copies.h"
#include "passes/autocast.h"
#include "passes/grad_scaler.h"
#include "passes/memory_plan.h"
#include "passes/pass_manager.h"
#include "runtime/autograd/grad_mode.h"
#include "training/amp/grad_scaler.h"

namespace stepjit::frontend {
namespace {

passes::Target TargetOf(Device device) {
  return device.is_cuda() ? passes::Target::kCuda : passes::Target::kCpu;
}

// STEPJIT_DUMP's folder for a compiled function named `name`: <dir>/<name>,
// or <dir>/<name>-2, -3, ... for the second, third function of that name in
// this process (a train and an eval step each keep their files); "" when
// dumping is off. Characters a folder name should not hold become '_'.
std::string FunctionDumpRoot(const std::string& name) {
  const std::optional<std::string> dir = config::Get(config::Env::kDump);
  if (!dir) return "";
  std::string safe = name.empty() ? std::string("step") : name;
  for (char& c : safe) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
          c == '.'))
      c = '_';
  }
  if (safe == "." || safe == "..") safe = "step";
  static absl::Mutex mu(absl::kConstInit);
  static auto* seen = new absl::flat_hash_map<std::string, int>;
  int n = 0;
  {
    absl::MutexLock lock(&mu);
    n = ++(*seen)[safe];
  }
  if (n > 1) absl::StrAppend(&safe, "-", n);
  return (std::filesystem::path(*dir) / safe).string();
}

// The dump folder of trace `index` of the function dumping into `root`:
// the root itself for the first trace, trace<k> under it for trace k > 0.
std::string DumpDir(const std::string& root, size_t index) {
  if (root.empty()) return "";
  std::filesystem::path path(root);
  if (index > 0) path /= absl::StrCat("trace", index);
  return path.string();
}

// Whether files can be created in `dir` (made if missing).
bool Writable(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::filesystem::path probe =
      std::filesystem::path(dir) / ".stepjit-dump-probe";
  const bool ok = static_cast<bool>(std::ofstream(probe));
  std::filesystem::remove(probe, ec);
  return ok;
}

void DumpTrace(const ir::Graph& graph, const std::string& dir) {
  if (dir.empty()) return;
  std::filesystem::path path(dir);
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  std::ofstream out(path / "000-trace.ir");
  if (!out) {
    std::cerr << "stepjit: STEPJIT_DUMP: cannot write "
              << (path / "000-trace.ir") << "; compiling without IR dumps\n";
    return;
  }
  ir::Print(graph, out);
  out.close();
  if (out) DumpDot(graph, dir, "000-trace");
}

}  // namespace

// Where a traced step runs: the device of its CUDA inputs or state, if any.
Device StepDevice(const Trace& trace, const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs) {
    if (t.defined() && t.device().is_cuda()) return t.device();
  }
  for (const Tensor& t : trace.state) {
    if (t.defined() && t.device().is_cuda()) return t.device();
  }
  return Device::cpu();
}

const std::string& Specializer::DumpRoot() const {
  if (!dump_root_) dump_root_ = FunctionDumpRoot(options_.name);
  return *dump_root_;
}

Specializer::Specializer(const CompileOptions& options)
    : options_(options),
      loss_scaling_(options.loss_scaling.value_or(options.amp == DType::kF16)) {
  // Same checks and messages as amp::GradScaler.
  if (loss_scaling_) {
    const amp::GradScaler validated(options.scaler);
  }
  const std::string pipeline_ = Pipeline(1);
  // The state the passes declare, created once and shared by every trace.
  // A pipeline that does not parse adds none; Optimize reports its error.
  if (absl::StatusOr<passes::Pipeline> parsed =
          passes::ParsePipelineText(pipeline_);
      parsed.ok()) {
    for (const passes::StateParam& p : passes::PipelineState(*parsed)) {
      Tensor t = full(p.type.shape, p.initial, {.dtype = p.type.dtype});
      MarkOwnedState(t);
      compiler_state_.emplace_back(p.name, std::move(t));
    }
  }
}

std::string Specializer::Pipeline(int world_size) const {
  std::string prefix;
  if (options_.amp != DType::kF32) {
    prefix = options_.amp == DType::kBF16 ? "autocast-bf16," : "autocast-f16,";
  }
  if (loss_scaling_) {
    const passes::GradScalerPassConfig scaler{
        .init_scale = options_.scaler.init_scale,
        .growth_factor = options_.scaler.growth_factor,
        .backoff_factor = options_.scaler.backoff_factor,
        .growth_interval = options_.scaler.growth_interval,
        .world_size = world_size};
    prefix += scaler.PipelineEntry() + ",";
  }
  if (options_.amp != DType::kF32) prefix += "amp-weight-copies,";
  return prefix + options_.pipeline;
}

const Tensor* Specializer::CompilerState(absl::string_view name) const {
  for (const auto& [n, t] : compiler_state_) {
    if (n == name) return &t;
  }
  return nullptr;
}

// Verifies, optimizes and builds a recorded trace.
std::unique_ptr<Specialization> Specializer::Build(Signature signature,
                                                   Trace trace, Device device,
                                                   size_t index,
                                                   bool shape_generic) {
  auto spec = std::make_unique<Specialization>();
  spec->shape_generic = shape_generic;
  spec->signature = std::move(signature);
  spec->trace = std::move(trace);
  if (!spec->trace.break_reason.empty()) {
    spec->eager_only = true;
    spec->reason = "graph break: " + spec->trace.break_reason;
    return spec;
  }
  // A recording call's trace comes without its graph.
  if (spec->trace.graph == nullptr)
    spec->trace.graph = BuildGraph(spec->trace.record, options_.name);
  spec->record = std::move(spec->trace.record);
  spec->record.IndexLifted();
  for (size_t i = 0; i < spec->record.nodes.size(); ++i) {
    const TraceRecord::Node& n = spec->record.nodes[i];
    if (!n.lifted) continue;
    spec->lifted.push_back(i);
    spec->lifted_inputs.push_back(
        scalar_tensor(n.attrs.GetDouble(ir::AttrKey::kValue),
                      {.dtype = n.type.dtype, .device = device}));
  }
  spec->unguarded = UnguardedState(spec->trace);
  spec->traced_state = spec->trace.state.size();
  spec->device = device;
  // Kept always: check_next() may ask for a check (and its bisection) later.
  spec->traced_ir = ir::Print(*spec->trace.graph);
  if (absl::Status st = ir::Verify(*spec->trace.graph); !st.ok()) {
    spec->eager_only = true;
    spec->reason =
        absl::StrCat("the traced graph failed verification: ", st.message());
  } else if (absl::Status st =
                 Optimize(*spec->trace.graph, index, device, *spec);
             !st.ok()) {
    spec->eager_only = true;
    spec->reason = absl::StrCat("the pass pipeline failed: ", st.message());
  } else if (absl::Status st = BindCompilerState(*spec, device); !st.ok()) {
    spec->eager_only = true;
    spec->reason = std::string(st.message());
  } else {
    // The guards cover the state the compiler added too.
    spec->state_guards = MakeStateGuards(spec->trace);
    runtime::ProgramOptions popts =
        runtime::ProgramOptions::WithDumps(DumpDir(DumpRoot(), index));
    popts.device = device;
    popts.random_layout = spec->trace.random;
    popts.cuda_graphs = options_.cuda_graphs;
    popts.cuda_multi_region = options_.cuda_multi_region;
    popts.shape_generic = shape_generic;
    const auto start = std::chrono::steady_clock::now();
    auto program = runtime::Program::Build(*spec->trace.graph, popts);
    spec->build_ms = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (!program.ok()) {
      spec->eager_only = true;
      spec->reason = absl::StrCat("building the program failed: ",
                                  program.status().message());
    } else {
      spec->program = *std::move(program);
    }
  }
  return spec;
}

// Writes 000-trace.ir and .dot, then runs the pipeline for `device` (which
// dumps NNN-<pass>.ir) and writes final.dot; trace k > 0 dumps into the
// subdirectory trace<k>. Each .dot gets its .svg when Graphviz is installed.
absl::Status Specializer::Optimize(ir::Graph& graph, size_t index,
                                   Device device, Specialization& spec) const {
  DumpTrace(graph, DumpDir(DumpRoot(), index));
  passes::PipelineOptions popts = passes::FromEnvironment();
  popts.dump_dir = DumpDir(DumpRoot(), index);
  // A dump that cannot be written is reported (DumpTrace) and skipped: it
  // never turns compilation off.
  if (!popts.dump_dir.empty() && !Writable(popts.dump_dir))
    popts.dump_dir.clear();
  passes::PipelineStats pstats;
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(passes::RunPipeline(
      graph,
      passes::PipelineForTarget(Pipeline(spec.signature.world_size),
                                TargetOf(device)),
      popts, &pstats));
  spec.passes_ms = std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  if (!popts.dump_dir.empty()) DumpDot(graph, popts.dump_dir, "final");
  spec.pass_stats = pstats.ToString();
  spec.planned_peak_bytes = pstats.Get(passes::kPlannedPeakBytes);
  return absl::OkStatus();
}

// The state params passes added follow the traced state: grad-scaler's
// %amp_* in the order the pipeline declared them (PipelineState), each bound
// to the compiler's own tensor made from that declaration, and
// amp-weight-copies' %<state>.as_<dtype>, each bound to a new tensor that
// RefreshStateCopies fills before the first run.
absl::Status Specializer::BindCompilerState(Specialization& spec,
                                            Device device) {
  Trace& trace = spec.trace;
  // The compiler's own state lives where the step runs.
  for (auto& [name, t] : compiler_state_) {
    if (t.device() != device) {
      t = t.to(device);
      MarkOwnedState(t);
    }
  }
  std::vector<const ir::Value*> state_params;
  for (const ir::Value* p : trace.graph->params()) {
    if (trace.graph->param_kind(p) == ir::ParamKind::kState)
      state_params.push_back(p);
  }
  const size_t traced = trace.state.size();
  size_t declared = 0;
  for (size_t i = traced; i < state_params.size(); ++i) {
    const std::string& name = state_params[i]->name();
    if (const std::optional<passes::WeightCopyOf> of =
            passes::ParseWeightCopyName(name)) {
      size_t source = 0;
      while (source < traced && state_params[source]->name() != of->state)
        ++source;
      const ir::TensorType& type = state_params[i]->type();
      if (source == traced ||
          state_params[source]->type().shape != type.shape ||
          trace.state[source].dtype() != DType::kF32) {
        return absl::InternalError(absl::StrCat(
            "state param %", name, " names no f32 state param %", of->state,
            " of shape ", ir::ShapeToString(type.shape)));
      }
      Tensor copy = empty(type.shape, {.dtype = type.dtype, .device = device});
      MarkOwnedState(copy);
      spec.state_copies.push_back(
          {.copy = trace.state.size(), .source = source});
      trace.state.push_back(std::move(copy));
      continue;
    }
    if (declared == compiler_state_.size() ||
        compiler_state_[declared].first != name) {
      return absl::InternalError(absl::StrCat(
          "a pass added state param %", name, " where the pipeline declares ",
          declared == compiler_state_.size()
              ? std::string("no more")
              : absl::StrCat("%", compiler_state_[declared].first)));
    }
    trace.state.push_back(compiler_state_[declared++].second);
  }
  if (declared != compiler_state_.size()) {
    return absl::InternalError(absl::StrCat(
        "the passes added ", declared, " of the ", compiler_state_.size(),
        " state params the pipeline declares"));
  }
  return absl::OkStatus();
}

void RefreshStateCopies(std::vector<StateCopy>& copies,
                        const std::vector<Tensor>& state) {
  NoGradGuard no_grad;
  for (StateCopy& c : copies) {
    const Tensor& source = state[c.source];
    if (c.current && source.storage().get() == c.storage &&
        source.version() == c.version) {
      continue;
    }
    Tensor copy = state[c.copy];
    copy.copy_(source);
  }
}

void MarkStateCopiesCurrent(std::vector<StateCopy>& copies,
                            const std::vector<Tensor>& state) {
  for (StateCopy& c : copies) {
    const Tensor& source = state[c.source];
    c.current = true;
    c.storage = source.storage().get();
    c.version = source.version();
  }
}

// Runs `s`'s traced graph after the first k passes, interpreted.
PassBisection Specializer::BisectionFor(
    const Specialization& s, const std::vector<Tensor>& inputs) const {
  PassBisection b;
  const passes::PipelineOptions env = passes::FromEnvironment();
  // A compiled step's pipeline parses; one that does not bisects nothing.
  const absl::StatusOr<passes::Pipeline> pipeline =
      passes::ParsePipelineText(passes::PipelineForTarget(
          Pipeline(s.signature.world_size), TargetOf(s.device)));
  std::vector<std::string> entries;  // with their options, to run
  if (pipeline.ok()) {
    for (const passes::PipelineEntry& e : pipeline->entries) {
      if (absl::c_linear_search(env.disabled, e.pass->name)) continue;
      b.pipeline.emplace_back(e.pass->name);
      entries.push_back(e.ToString());
    }
  }
  b.run = [&s, &inputs, entries = std::move(entries)](
              int k) -> absl::StatusOr<std::vector<Tensor>> {
    ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> graph,
                     ir::ParseGraph(s.traced_ir, "trace"));
    if (k > 0) {
      passes::PipelineStats pstats;
      const std::vector<std::string> prefix(entries.begin(),
                                            entries.begin() + k);
      RETURN_IF_ERROR(passes::RunPipeline(*graph, absl::StrJoin(prefix, ","),
                                          passes::PipelineOptions{}, &pstats));
    }
    runtime::ProgramOptions popts;
    popts.codegen = false;
    popts.use_cache = false;
    popts.device = s.device;
    popts.random_layout = s.trace.random;
    popts.cuda_graphs = false;
    ASSIGN_OR_RETURN(runtime::Program program,
                     runtime::Program::Build(*graph, popts));
    size_t state_params = 0;
    for (const ir::Value* p : graph->params()) {
      state_params += graph->param_kind(p) == ir::ParamKind::kState ? 1 : 0;
    }
    if (state_params > s.trace.state.size()) {
      return absl::InternalError(absl::StrCat("the graph reads ", state_params,
                                              " state tensors, the step binds ",
                                              s.trace.state.size()));
    }
    return program.Run(inputs,
                       absl::MakeConstSpan(s.trace.state).first(state_params));
  };
  return b;
}

}  // namespace stepjit::frontend
