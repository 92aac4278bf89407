// Program: an interpreter over the IR that dispatches each node to the eager kernels.
#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/dump.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/ops.h"
#include "runtime/cuda/kernels/random_ops.h"
#include "runtime/dispatch.h"
#include "runtime/generator.h"
#include "runtime/profiler.h"
#include "runtime/testing_hooks.h"
#include "runtime/thread_pool.h"

namespace stepjit::runtime {

ProgramOptions ProgramOptions::WithDumps(std::string dump_dir) {
  ProgramOptions o;
  o.dump_dir = std::move(dump_dir);
  if (const char* cuda = std::getenv("STEPJIT_DUMP_CUDA");
      cuda != nullptr && *cuda != '\0') {
    const std::string v = cuda;
    o.dump_cuda = v != "0";
    if (v.rfind("ptx", 0) == 0)
      o.cuda_ptx_arch = v.size() > 4 ? v.substr(4) : "sm_90";
  }
  return o;
}

using ir::AttrKey;
using ir::NodeKind;

namespace {

// One launch per op and per fusion region; views launch nothing.
int CountKernels(const ir::Graph& g) {
  int n = 0;
  for (const auto& node : g.nodes()) {
    if (node->kind() == NodeKind::kFusion) ++n;
    else if (node->kind() == NodeKind::kOp && !ir::IsView(node->op())) ++n;
  }
  return n;
}

// For each node position, the values whose last read it is (params and
// returns excluded): the executor drops them there so buffers free early.
std::vector<std::vector<int>> LastUses(const ir::Graph& g) {
  absl::flat_hash_map<int, size_t> last;
  for (size_t pos = 0; pos < g.nodes().size(); ++pos) {
    for (const ir::Value* v : g.nodes()[pos]->inputs()) last[v->id()] = pos;
  }
  for (const ir::Value* p : g.params()) last.erase(p->id());
  for (const ir::Value* r : g.returns()) last.erase(r->id());
  std::vector<std::vector<int>> out(g.nodes().size());
  for (const auto& [id, pos] : last) out[pos].push_back(id);
  return out;
}

using LastUseMap = absl::flat_hash_map<const ir::Graph*, std::vector<std::vector<int>>>;

struct RunContext {
  RandomRemap random;
  // During CUDA-graph capture: random kernels read seed and offset from
  // these device slots (by traced offset), refreshed before each replay;
  // nothing is drawn from the generator while capturing.
  const absl::flat_hash_map<int64_t, int>* philox_slots = nullptr;
  const uint64_t* philox_device = nullptr;
  const LastUseMap* last_uses = nullptr;
  const RegionMap* regions = nullptr;
  const CudaRegionMap* cuda_regions = nullptr;
  const CudaGroupMap* cuda_groups = nullptr;
  // Group members whose results a group launch has stored already.
  absl::flat_hash_set<const ir::Node*> ran_in_group;
  // During CUDA-graph capture: every value the run creates, so that the
  // graph's buffers stay with it.
  std::vector<Tensor>* keep_alive = nullptr;
  // In RunChecked: compares each generated region with its interpretation.
  RegionChecker* checker = nullptr;
};

}  // namespace

int64_t RandomWords(const ir::Node& node) {
  const ir::OpId op = node.op();
  int64_t n = op == ir::OpId::kDropout ? ir::NumElements(node.inputs()[0]->type().shape)
                                       : ir::NumElements(node.output()->type().shape);
  return op == ir::OpId::kRandn ? 2 * n : n;
}

std::pair<uint64_t, uint64_t> RandomRemap::Draw(int64_t traced_offset, int64_t words) {
  auto it = offsets_.find(traced_offset);
  if (it == offsets_.end()) {
    it = offsets_.emplace(traced_offset,
                          default_generator().Reserve(static_cast<uint64_t>(words))).first;
  }
  // The generator's current seed: manual_seed between calls must change a
  // replay's draws as it changes the eager step's.
  return {default_generator().seed(), it->second};
}

ir::Attrs RandomRemap::Apply(const ir::Node& node) {
  ir::Attrs attrs = node.attrs();
  const auto [seed, offset] = Draw(attrs.GetInt(AttrKey::kOffset), RandomWords(node));
  attrs.Set(AttrKey::kOffset, static_cast<int64_t>(offset));
  attrs.Set(AttrKey::kSeed, static_cast<int64_t>(seed));
  return attrs;
}

std::vector<int> ReturnAliases(const ir::Graph& body) {
  absl::flat_hash_map<const ir::Value*, int> alias;
  for (size_t i = 0; i < body.params().size(); ++i) alias[body.params()[i]] = static_cast<int>(i);
  for (const auto& n : body.nodes()) {
    if (n->kind() != NodeKind::kOp || n->inputs().empty()) continue;
    auto it = alias.find(n->inputs()[0]);
    if (it == alias.end()) continue;
    if (ir::IsInplace(n->op()) && n->attrs().GetBool(AttrKey::kInPlace)) {
      alias[n->output()] = it->second;
    }
  }
  std::vector<int> out;
  for (const ir::Value* r : body.returns()) {
    auto it = alias.find(r);
    out.push_back(it == alias.end() ? -1 : it->second);
  }
  // Two returns in one buffer would overwrite each other.
  for (size_t i = 0; i < out.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (out[i] >= 0 && out[i] == out[j]) out[i] = -1;
    }
  }
  return out;
}

std::optional<GeneratedOperands> BindGenerated(const ir::Graph& body,
                                               const std::vector<int>& return_alias,
                                               Device device, std::vector<Tensor>& in) {
  GeneratedOperands ops;
  for (size_t i = 0; i < in.size(); ++i) {
    const ir::TensorType& t = body.params()[i]->type();
    if (in[i].dtype() != t.dtype || in[i].shape() != t.shape || in[i].device() != device) {
      return std::nullopt;
    }
    if (!in[i].is_contiguous()) in[i] = in[i].contiguous();
    ops.ptrs.push_back(in[i].data_ptr());
  }
  for (size_t r = 0; r < body.returns().size(); ++r) {
    const ir::TensorType& t = body.returns()[r]->type();
    const int alias = return_alias[r];
    ops.out.push_back(alias >= 0 && in[alias].shape() == t.shape
                          ? in[alias]
                          : empty(t.shape, {.dtype = t.dtype, .device = device}));
    ops.ptrs.push_back(ops.out.back().data_ptr());
  }
  return ops;
}

void FinishGenerated(const std::vector<int>& return_alias, const std::vector<Tensor>& in,
                     std::vector<Tensor>& out) {
  for (size_t r = 0; r < out.size(); ++r) {
    if (return_alias[r] >= 0 && out[r].is_same(in[return_alias[r]])) out[r].storage()->BumpVersion();
  }
}

namespace {

// Runs a generated region: operands are made contiguous first (a view's
// copy costs less than interpreting the region), outputs land in donated
// inputs where memory planning allowed it, and `launch` runs the kernel over
// the operand and output pointers. nullopt: dtypes, shapes or the device
// differ from the ones compiled for, and the caller interprets the region.
template <typename Launch>
std::optional<std::vector<Tensor>> RunGenerated(const ir::Graph& body,
                                                const std::vector<int>& return_alias,
                                                Device device, std::vector<Tensor>& in,
                                                Launch launch) {
  std::optional<GeneratedOperands> ops = BindGenerated(body, return_alias, device, in);
  if (!ops) return std::nullopt;
  launch(std::move(ops->ptrs));
  FinishGenerated(return_alias, in, ops->out);
  return std::move(ops->out);
}

std::optional<std::vector<Tensor>> RunCompiled(const CompiledRegion& k, const ir::Graph& body,
                                               std::vector<Tensor>& in) {
  return RunGenerated(body, k.return_alias, Device::cpu(), in, [&](std::vector<void*> ptrs) {
    RunRegionKernel(k.kernel, std::move(ptrs));
  });
}

// Queued on the current stream of the program's device.
std::optional<std::vector<Tensor>> RunCompiledCuda(const CudaRegion& k, const ir::Graph& body,
                                                   Device device, std::vector<Tensor>& in) {
  return RunGenerated(body, k.return_alias, device, in, [&](std::vector<void*> ptrs) {
    ThrowIfError(cuda::LaunchRegion(*k.region, ptrs, cuda::CurrentStream()));
  });
}

// "matmul [128, 512]" or "<kernel> [..]" (interpreted regions say so).
std::string ProfileLabel(const ir::Node& node, const RunContext& ctx) {
  if (node.kind() == NodeKind::kFusion) {
    auto it = ctx.regions->find(&node);
    const bool cuda = ctx.cuda_regions->contains(&node);
    return absl::StrCat(it != ctx.regions->end() ? it->second.kernel.name
                        : cuda                   ? absl::StrCat(node.body()->name(), "(cuda)")
                                                 : absl::StrCat(node.body()->name(), "(interpreted)"),
                        " ", ir::ShapeToString(node.outputs()[0]->type().shape));
  }
  return absl::StrCat(ir::OpName(node.op()), " ", ir::ShapeToString(node.output()->type().shape));
}

void CollectLastUses(const ir::Graph& g, LastUseMap& out) {
  out[&g] = LastUses(g);
  for (const auto& n : g.nodes()) {
    if (n->kind() == NodeKind::kFusion) CollectLastUses(*n->body(), out);
  }
}

void RunGraph(const ir::Graph& g, std::vector<Tensor>& env, RunContext& ctx);

// A region's body op by op over `operands` (which in-place ops may write);
// returns the body's returns.
std::vector<Tensor> InterpretBody(const ir::Graph& body, absl::Span<const Tensor> operands,
                                  RunContext& ctx) {
  std::vector<Tensor> inner(body.num_values());
  for (size_t i = 0; i < body.params().size(); ++i) inner[body.params()[i]->id()] = operands[i];
  RunGraph(body, inner, ctx);
  std::vector<Tensor> out;
  for (const ir::Value* r : body.returns()) out.push_back(inner[r->id()]);
  return out;
}

// RunChecked: `region` ran as generated code from operands `snapshot` holds
// copies of; its body interpreted on them is the reference.
void CheckRegion(const ir::Node& region, absl::Span<const Tensor> generated,
                 absl::Span<const Tensor> snapshot, RunContext& ctx) {
  ctx.checker->Compare(region, generated, InterpretBody(*region.body(), snapshot, ctx));
}

// RunCudaGroup, and under RunChecked the check of every member launched.
bool RunGroup(const CudaRegionGroup& group, std::vector<Tensor>& env, RunContext& ctx) {
  std::vector<std::vector<Tensor>> snapshots;
  if (ctx.checker != nullptr) {
    for (const ir::Node* m : group.members) {
      std::vector<Tensor> in;
      for (const ir::Value* v : m->inputs()) in.push_back(env[v->id()]);
      snapshots.push_back(RegionChecker::Snapshot(in));
    }
  }
  if (!RunCudaGroup(group, env, ctx.keep_alive)) return false;
  for (size_t i = 0; i < snapshots.size(); ++i) {
    const ir::Node& m = *group.members[i];
    std::vector<Tensor> out;
    for (const ir::Value* v : m.outputs()) out.push_back(env[v->id()]);
    CheckRegion(m, out, snapshots[i], ctx);
  }
  return true;
}

void RunGraph(const ir::Graph& g, std::vector<Tensor>& env, RunContext& ctx) {
  const std::vector<std::vector<int>>& last_uses = ctx.last_uses->at(&g);
  const bool profiling = ProfilingEnabled();
  for (size_t pos = 0; pos < g.nodes().size(); ++pos) {
    const ir::Node* node = g.nodes()[pos].get();
    const auto t0 = profiling ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    std::vector<Tensor> in;
    in.reserve(node->inputs().size());
    for (const ir::Value* v : node->inputs()) in.push_back(env[v->id()]);
    switch (node->kind()) {
      case NodeKind::kOp: {
        // Values are immutable: an update overwrites its input only where
        // memory planning proved the old value dead (`in_place = true`).
        if (ir::IsInplace(node->op()) && !node->attrs().GetBool(AttrKey::kInPlace)) {
          in[0] = in[0].clone();
        }
        if (node->outputs().size() > 1) {  // a matmul with its bias gradient
          const std::vector<Tensor> out = DispatchResults(
              node->op(), in, node->attrs(), static_cast<int>(node->outputs().size()));
          for (size_t i = 0; i < out.size(); ++i) env[node->outputs()[i]->id()] = out[i];
          if (ctx.keep_alive != nullptr) {
            ctx.keep_alive->insert(ctx.keep_alive->end(), in.begin(), in.end());
            ctx.keep_alive->insert(ctx.keep_alive->end(), out.begin(), out.end());
          }
          break;
        }
        if (ir::GetOpInfo(node->op()).kind == ir::OpKind::kRandom) {
          if (ctx.philox_device != nullptr) {
            const int slot = ctx.philox_slots->at(node->attrs().GetInt(AttrKey::kOffset));
            cuda::PhiloxSlotGuard from_slot(ctx.philox_device + 2 * slot);
            env[node->output()->id()] = Dispatch(node->op(), in, node->attrs());
          } else {
            env[node->output()->id()] = Dispatch(node->op(), in, ctx.random.Apply(*node));
          }
        } else {
          env[node->output()->id()] = Dispatch(node->op(), in, node->attrs());
        }
        if (ctx.keep_alive != nullptr) {
          ctx.keep_alive->insert(ctx.keep_alive->end(), in.begin(), in.end());
          ctx.keep_alive->push_back(env[node->output()->id()]);
        }
        break;
      }
      case NodeKind::kFusion: {
        const ir::Graph& body = *node->body();
        if (auto grp = ctx.cuda_groups->find(node); grp != ctx.cuda_groups->end()) {
          if (grp->second->members.front() == node && RunGroup(*grp->second, env, ctx)) {
            ctx.ran_in_group.insert(grp->second->members.begin(), grp->second->members.end());
          }
          if (ctx.ran_in_group.contains(node)) break;
        }
        const auto k = ctx.regions->find(node);
        const auto c = ctx.cuda_regions->find(node);
        const bool generated = k != ctx.regions->end() || c != ctx.cuda_regions->end();
        const std::vector<Tensor> snapshot = generated && ctx.checker != nullptr
                                                 ? RegionChecker::Snapshot(in)
                                                 : std::vector<Tensor>();
        std::optional<std::vector<Tensor>> out;
        if (k != ctx.regions->end()) {
          out = RunCompiled(k->second, body, in);
        } else if (c != ctx.cuda_regions->end()) {
          out = RunCompiledCuda(c->second, body, FactoryDevice(), in);
        }
        if (out && ctx.checker != nullptr) CheckRegion(*node, *out, snapshot, ctx);
        if (out) {
          for (size_t i = 0; i < out->size(); ++i) env[node->outputs()[i]->id()] = (*out)[i];
          if (ctx.keep_alive != nullptr) {
            ctx.keep_alive->insert(ctx.keep_alive->end(), in.begin(), in.end());
            ctx.keep_alive->insert(ctx.keep_alive->end(), out->begin(), out->end());
          }
          break;
        }
        const std::vector<Tensor> results = InterpretBody(body, in, ctx);
        for (size_t i = 0; i < results.size(); ++i) env[node->outputs()[i]->id()] = results[i];
        break;
      }
      case NodeKind::kAssign: {
        Tensor& target = in[0];
        const Tensor& value = in[1];
        // In-place updates already wrote the state's own buffer.
        const bool same = value.storage() == target.storage() &&
                          value.offset() == target.offset() &&
                          value.strides() == target.strides();
        if (!same) target.copy_(value);
        break;
      }
    }
    for (int id : last_uses[pos]) env[id] = Tensor();
    if (profiling && node->kind() != NodeKind::kAssign) {
      RecordProfile(ProfileLabel(*node, ctx),
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
}

}  // namespace

void RunRegionKernel(const codegen::cpu::RegionKernel& k, std::vector<void*> ptrs) {
  std::vector<uint64_t> scratch(static_cast<size_t>(k.num_slots) + 1);
  ptrs.push_back(scratch.data());
  std::vector<std::vector<double>> accs;
  for (const codegen::cpu::Accumulator& a : k.accumulators) {
    accs.emplace_back(static_cast<size_t>(k.reduced_numel), a.init);
    ptrs.push_back(accs.back().data());
  }
  if (k.scalar != nullptr) k.scalar(ptrs.data());
  constexpr int64_t kGrain = 16384;  // elements per task
  if (k.parallel) {
    const int64_t units = k.numel / k.split_align;
    ParallelFor(units, std::max<int64_t>(1, kGrain / k.split_align), [&](int64_t b, int64_t e) {
      k.main(ptrs.data(), b * k.split_align, e * k.split_align);
    });
  } else {
    k.main(ptrs.data(), 0, k.numel);
  }
  if (k.reduced != nullptr) {
    ParallelFor(k.reduced_numel, kGrain, [&](int64_t b, int64_t e) { k.reduced(ptrs.data(), b, e); });
  }
}

namespace {
void DumpKernel(const codegen::cpu::RegionKernel& k, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream(std::filesystem::path(dir) / (k.name + ".ll")) << k.llvm_ir_raw;
  std::ofstream(std::filesystem::path(dir) / (k.name + ".opt.ll")) << k.llvm_ir;
}
}  // namespace

// The CUDA C (and PTX) of every region the CUDA backend lowers; a region it
// does not lower, or a failed write or compile, is reported on stderr and
// does not stop the CPU program.
void DumpCuda(const ir::Graph& graph, const ProgramOptions& options) {
  codegen::cuda::NvrtcOptions nvrtc{.arch = options.cuda_ptx_arch, .want_ptx = true};
  for (const auto& n : graph.nodes()) {
    if (n->kind() != NodeKind::kFusion) continue;
    absl::StatusOr<codegen::cuda::RegionSource> region = codegen::cuda::EmitRegion(*n->body());
    if (!region.ok()) {
      if (!absl::IsUnimplemented(region.status())) {
        std::cerr << "stepjit: STEPJIT_DUMP_CUDA: " << n->body()->name() << ": "
                  << region.status().message() << "\n";
      }
      continue;
    }
    absl::Status st = codegen::cuda::DumpRegion(options.dump_dir, *region,
                                                options.cuda_ptx_arch.empty() ? nullptr : &nvrtc);
    if (!st.ok()) std::cerr << "stepjit: STEPJIT_DUMP_CUDA: " << st.message() << "\n";
  }
}

absl::StatusOr<Program> Program::Build(const ir::Graph& graph, ProgramOptions options) {
  Program p(&graph);
  p.options_ = options;
  // A step on CUDA always dumps the CUDA C of its kernels.
  if ((options.dump_cuda || options.device.is_cuda()) && !options.dump_dir.empty()) {
    DumpCuda(graph, options);
  }
  p.kernels_per_run_ = CountKernels(graph);
  CollectLastUses(graph, p.last_uses_);
  if (options.device.is_cuda()) {
    RETURN_IF_ERROR(p.BuildCuda());
    return p;
  }
  if (options.codegen) {
    const codegen::cpu::RegionCompileOptions copts{.want_optimized_ir = !options.dump_dir.empty(),
                                                   .use_cache = options.use_cache};
    for (const auto& n : graph.nodes()) {
      if (n->kind() != NodeKind::kFusion) continue;
      // Test-only (runtime/testing_hooks.h): a wrong kernel, never cached.
      const std::unique_ptr<ir::Graph> miscompiled = MiscompiledBodyForTesting(graph, *n);
      codegen::cpu::RegionCompileOptions o = copts;
      if (miscompiled) o.use_cache = false;
      absl::StatusOr<codegen::cpu::RegionKernel> k =
          codegen::cpu::CompileRegion(miscompiled ? *miscompiled : *n->body(), o);
      if (k.ok()) {
        if (!options.dump_dir.empty()) DumpKernel(*k, options.dump_dir);
        p.codegen_ms_ += k->compile_ms;
        p.cached_regions_ += k->cache_hit ? 1 : 0;
        p.regions_[n.get()] = CompiledRegion{*std::move(k), ReturnAliases(*n->body())};
      } else if (absl::IsUnimplemented(k.status())) {
        p.interpreted_.push_back({n->body()->name(), std::string(k.status().message())});
      } else {
        return k.status();  // a real code generation failure: the caller falls back
      }
    }
  } else {
    for (const auto& n : graph.nodes()) {
      if (n->kind() == NodeKind::kFusion)
        p.interpreted_.push_back({n->body()->name(), "code generation is off"});
    }
  }
  return p;
}

std::vector<Tensor> Program::Run(absl::Span<const Tensor> inputs,
                                 absl::Span<const Tensor> state) const {
  if (options_.device.is_cuda()) return RunCuda(inputs, state);
  return RunOnce(inputs, state, nullptr, nullptr);
}

std::vector<Tensor> Program::RunChecked(absl::Span<const Tensor> inputs,
                                        absl::Span<const Tensor> state,
                                        std::vector<RegionMismatch>* mismatches) const {
  RegionChecker checker(*graph_);
  std::vector<Tensor> out;
  {
    // As RunCuda's first run, on the caller's stream: no capture, and the
    // host reads of the comparisons wait for the kernels they read.
    std::optional<FactoryDeviceGuard> factories;
    if (options_.device.is_cuda()) factories.emplace(options_.device);
    out = RunOnce(inputs, state, nullptr, nullptr, &checker);
  }
  *mismatches = checker.Take();
  return out;
}

std::vector<Tensor> Program::RunOnce(absl::Span<const Tensor> inputs,
                                     absl::Span<const Tensor> state,
                                     std::vector<Tensor>* keep_alive,
                                     const uint64_t* philox_device,
                                     RegionChecker* checker) const {
  NoGradGuard no_grad;
  std::vector<Tensor> env(graph_->num_values());
  size_t next_input = 0, next_state = 0;
  for (const ir::Value* param : graph_->params()) {
    if (graph_->param_kind(param) == ir::ParamKind::kInput) {
      SJ_CHECK(next_input < inputs.size(), "too few inputs bound");
      env[param->id()] = inputs[next_input++];
    } else {
      SJ_CHECK(next_state < state.size(), "too few state tensors bound");
      env[param->id()] = state[next_state++];
    }
  }
  SJ_CHECK(next_input == inputs.size() && next_state == state.size(),
           "bound ", inputs.size(), " inputs and ", state.size(), " state tensors to a graph with ",
           next_input, " and ", next_state);
  RunContext ctx;
  ctx.last_uses = &last_uses_;
  ctx.regions = &regions_;
  ctx.cuda_regions = &cuda_regions_;
  ctx.cuda_groups = &cuda_groups_;
  ctx.keep_alive = keep_alive;
  ctx.philox_slots = &philox_slots_;
  ctx.philox_device = philox_device;
  ctx.checker = checker;
  RunGraph(*graph_, env, ctx);
  std::vector<Tensor> out;
  for (const ir::Value* v : graph_->returns()) out.push_back(env[v->id()]);
  return out;
}

}  // namespace stepjit::runtime
