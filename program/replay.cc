// The replay loop: one pass over a graph's nodes, the same for every device.
#include "program/replay.h"

#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "ir/op.h"
#include "ir/status.h"
#include "program/random_layout.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/device_runtime.h"
#include "runtime/dispatch.h"
#include "runtime/pending.h"
#include "runtime/profiler.h"

namespace stepjit::runtime {

using ir::AttrKey;
using ir::NodeKind;

namespace {

// For each node position, the values whose last read it is (params and
// returns excluded).
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

struct RunContext {
  const ReplayPlan* plan = nullptr;
  const RunHooks* hooks = nullptr;
  // Group members whose results a group launch has stored already.
  absl::flat_hash_set<const ir::Node*> ran_in_group;
  // In RunChecked: compares each generated region with its interpretation.
  RegionChecker* checker = nullptr;
  // The results of the collectives this run started: one still being
  // written (all_reduce {async}) is waited for before the run returns.
  std::vector<Tensor> collective_results;

  void KeepAlive(absl::Span<const Tensor> in, absl::Span<const Tensor> out) {
    if (hooks->keep_alive == nullptr) return;
    hooks->keep_alive->insert(hooks->keep_alive->end(), in.begin(), in.end());
    hooks->keep_alive->insert(hooks->keep_alive->end(), out.begin(), out.end());
  }
};

// "matmul [128, 512]" or "<kernel> [..]" (interpreted regions say so).
std::string ProfileLabel(const ir::Node& node, const RunContext& ctx) {
  if (node.kind() == NodeKind::kFusion) {
    auto it = ctx.plan->regions->find(&node);
    return absl::StrCat(
        it != ctx.plan->regions->end()
            ? it->second->label()
            : absl::StrCat(node.body()->name(), "(interpreted)"),
        " ", ir::ShapeToString(node.outputs()[0]->type().shape));
  }
  return absl::StrCat(ir::OpName(node.op()), " ",
                      ir::ShapeToString(node.output()->type().shape));
}

void RunGraph(const ir::Graph& g, std::vector<Tensor>& env, RunContext& ctx);

// A region's body op by op over `operands` (which in-place ops may write);
// returns the body's returns.
std::vector<Tensor> InterpretBody(const ir::Graph& body,
                                  absl::Span<const Tensor> operands,
                                  RunContext& ctx) {
  std::vector<Tensor> inner(body.num_values());
  for (size_t i = 0; i < body.params().size(); ++i)
    inner[body.params()[i]->id()] = operands[i];
  RunGraph(body, inner, ctx);
  std::vector<Tensor> out;
  for (const ir::Value* r : body.returns()) out.push_back(inner[r->id()]);
  return out;
}

// RunChecked: `region` ran as generated code from operands `snapshot` holds
// copies of; its body interpreted on them is the reference.
void CheckRegion(const ir::Node& region, absl::Span<const Tensor> generated,
                 absl::Span<const Tensor> snapshot, RunContext& ctx) {
  ctx.checker->Compare(region, generated,
                       InterpretBody(*region.body(), snapshot, ctx));
}

// The backend's launch of the group `members`, and under RunChecked the
// check of every member launched. False: nothing launched.
bool RunGroup(absl::Span<const ir::Node* const> members,
              std::vector<Tensor>& env, RunContext& ctx) {
  std::vector<std::vector<Tensor>> ins;
  for (const ir::Node* m : members) {
    ins.emplace_back();
    for (const ir::Value* v : m->inputs()) ins.back().push_back(env[v->id()]);
  }
  std::vector<std::vector<Tensor>> snapshots;
  if (ctx.checker != nullptr) {
    for (const std::vector<Tensor>& in : ins)
      snapshots.push_back(RegionChecker::Snapshot(in));
  }
  std::optional<std::vector<std::vector<Tensor>>> outs =
      ctx.plan->backend->LaunchGroup(*members.front(), ins);
  if (!outs) return false;
  for (size_t m = 0; m < members.size(); ++m) {
    const std::vector<Tensor>& out = (*outs)[m];
    for (size_t i = 0; i < out.size(); ++i)
      env[members[m]->outputs()[i]->id()] = out[i];
    ctx.KeepAlive(ins[m], out);
  }
  for (size_t m = 0; m < snapshots.size(); ++m)
    CheckRegion(*members[m], (*outs)[m], snapshots[m], ctx);
  return true;
}

void RunOp(const ir::Node& node, const PreparedOp& launch,
           std::vector<Tensor>& in, std::vector<Tensor>& env, RunContext& ctx) {
  // Values are immutable: an update overwrites its input only where memory
  // planning proved the old value dead (`in_place = true`).
  if (ir::IsInplace(node.op()) && !node.attrs().GetBool(AttrKey::kInPlace)) {
    in[0] = in[0].clone();
  }
  // (A random op reads the run's random state, its last operand.)
  absl::InlinedVector<Tensor, 2> out(node.outputs().size());
  launch.Launch(in, node.attrs(), absl::MakeSpan(out));
  for (size_t i = 0; i < out.size(); ++i) env[node.outputs()[i]->id()] = out[i];
  ctx.KeepAlive(in, out);
}

// A fusion node: in a group launch, as generated code, or interpreted.
void RunFusion(const ir::Node& node, std::vector<Tensor>& in,
               std::vector<Tensor>& env, RunContext& ctx) {
  if (ctx.ran_in_group.contains(&node)) return;
  if (absl::Span<const ir::Node* const> members =
          ctx.plan->backend->GroupStartingAt(node);
      !members.empty() && RunGroup(members, env, ctx)) {
    ctx.ran_in_group.insert(members.begin(), members.end());
    return;
  }
  const ir::Graph& body = *node.body();
  const auto k = ctx.plan->regions->find(&node);
  CompiledRegion* region =
      k != ctx.plan->regions->end() ? k->second.get() : nullptr;
  const std::vector<Tensor> snapshot =
      region != nullptr && ctx.checker != nullptr ? RegionChecker::Snapshot(in)
                                                  : std::vector<Tensor>();
  std::optional<std::vector<Tensor>> out;
  if (region != nullptr) out = region->Launch(body, in);
  if (out) {
    if (ctx.checker != nullptr) CheckRegion(node, *out, snapshot, ctx);
    for (size_t i = 0; i < out->size(); ++i)
      env[node.outputs()[i]->id()] = (*out)[i];
    ctx.KeepAlive(in, *out);
    return;
  }
  const std::vector<Tensor> results = InterpretBody(body, in, ctx);
  for (size_t i = 0; i < results.size(); ++i)
    env[node.outputs()[i]->id()] = results[i];
}

// The profiler's account of one call of `node` (runtime/profiler.h).
ProfileWork WorkOf(const ir::Node& node) {
  std::vector<ir::TensorType> in;
  for (const ir::Value* v : node.inputs()) in.push_back(v->type());
  auto bytes = [](const ir::TensorType& t) {
    return static_cast<double>(ir::NumElements(t.shape)) *
           static_cast<double>(ir::DTypeSize(t.dtype));
  };
  if (node.kind() == NodeKind::kOp) {
    // A matmul's further result (its bias gradient) is written too.
    ProfileWork w =
        OpWork(node.op(), in, node.outputs()[0]->type(), node.attrs());
    for (size_t i = 1; i < node.outputs().size(); ++i)
      w.bytes += bytes(node.outputs()[i]->type());
    return w;
  }
  ProfileWork w;
  w.kind = ProfileKind::kRegion;
  for (const ir::TensorType& t : in) w.bytes += bytes(t);
  for (const ir::Value* v : node.outputs()) w.bytes += bytes(v->type());
  return w;
}

// A replayed node's span (only a top-level node that launches something:
// one per kernel Program::kernels_per_run counts): on the host, and on the
// device's clock where the device times its own work (the host span then
// only launched it and is not counted). A group launch is one span.
class NodeProfile {
 public:
  NodeProfile(const ir::Node& node, const RunContext& ctx)
      : span_(kCatKernel, /*kernel=*/true) {
    if (ctx.plan->device.is_cpu()) return;
    timer_ = GetDeviceRuntime(ctx.plan->device.type).timer;
    if (timer_ != nullptr) device_start_ = timer_->Start();
  }

  void End(const ir::Node& node, const RunContext& ctx) {
    TraceEvent e;
    e.cat = kCatKernel;
    e.name = ProfileLabel(node, ctx);
    e.work = WorkOf(node);
    e.shape = ir::ShapeToString(node.outputs()[0]->type().shape);
    if (absl::Span<const ir::Node* const> group =
            ctx.plan->backend->GroupStartingAt(node);
        !group.empty() && ctx.ran_in_group.contains(&node)) {
      e.name = absl::StrCat(e.name, " +", group.size() - 1, " regions");
      for (const ir::Node* m : group.subspan(1)) {
        const ProfileWork w = WorkOf(*m);
        e.work.bytes += w.bytes;
      }
    }
    span_.set_name(e.name);
    span_.set_work(e.work, e.shape);
    span_.set_counted(timer_ == nullptr);
    span_.End();
    if (timer_ == nullptr) return;
    e.counted = true;
    timer_->Stop(device_start_, std::move(e));
  }

 private:
  ProfileSpan span_;
  DeviceTimer* timer_ = nullptr;
  uint64_t device_start_ = 0;
};

// Whether `node` launches work of its own (CountKernels): not a view, a
// write-back, or a member of a group its first member launched.
bool Launches(const ir::Node& node, const RunContext& ctx) {
  switch (node.kind()) {
    case NodeKind::kAssign:
      return false;
    case NodeKind::kOp:
      return !ir::IsView(node.op());
    case NodeKind::kFusion:
      return !ctx.ran_in_group.contains(&node);
  }
  return false;
}

void RunAssign(std::vector<Tensor>& in) {
  Tensor& target = in[0];
  const Tensor& value = in[1];
  // In-place updates already wrote the state's own buffer.
  const bool same = value.storage() == target.storage() &&
                    value.offset() == target.offset() &&
                    value.strides() == target.strides();
  if (!same) target.copy_(value);
}

void RunGraph(const ir::Graph& g, std::vector<Tensor>& env, RunContext& ctx) {
  const GraphLaunches& launches = ctx.plan->launches->at(&g);
  const bool profiling = ProfilingEnabled() && &g == ctx.plan->graph;
  for (size_t pos = 0; pos < g.nodes().size(); ++pos) {
    const ir::Node* node = g.nodes()[pos].get();
    std::optional<NodeProfile> profile;
    if (profiling && Launches(*node, ctx)) profile.emplace(*node, ctx);
    std::vector<Tensor> in;
    in.reserve(node->inputs().size());
    for (const ir::Value* v : node->inputs()) in.push_back(env[v->id()]);
    // An async collective's result (all_reduce {async}) is waited for by
    // its first reader, so the work between the two overlaps it (a view
    // only restrides; its readers wait, as they share the storage).
    if (node->kind() != NodeKind::kOp || !ir::IsView(node->op()))
      WaitPending(in);
    switch (node->kind()) {
      case NodeKind::kOp:
        RunOp(*node, *launches.ops[pos], in, env, ctx);
        break;
      case NodeKind::kFusion:
        RunFusion(*node, in, env, ctx);
        break;
      case NodeKind::kAssign:
        RunAssign(in);
        break;
    }
    if (node->kind() == NodeKind::kOp && ir::IsCollective(node->op()) &&
        !node->outputs().empty())
      ctx.collective_results.push_back(env[node->outputs()[0]->id()]);
    for (int id : launches.last_uses[pos]) env[id] = Tensor();
    if (profile) profile->End(*node, ctx);
  }
}

}  // namespace

LaunchList PrepareLaunches(const ir::Graph& g, Device device) {
  LaunchList out;
  std::vector<const ir::Graph*> graphs = {&g};
  for (size_t i = 0; i < graphs.size(); ++i) {
    GraphLaunches& launches = out[graphs[i]];
    launches.last_uses = LastUses(*graphs[i]);
    std::vector<std::optional<PreparedOp>>& list = launches.ops;
    for (const auto& n : graphs[i]->nodes()) {
      list.emplace_back();
      if (n->kind() == NodeKind::kFusion) graphs.push_back(n->body());
      if (n->kind() != NodeKind::kOp) continue;
      std::vector<ir::TensorType> in, results;
      for (const ir::Value* v : n->inputs()) in.push_back(v->type());
      for (const ir::Value* v : n->outputs()) results.push_back(v->type());
      list.back().emplace(n->op(), in, results, device);
    }
  }
  return out;
}

int CountKernels(const ir::Graph& g) {
  int n = 0;
  for (const auto& node : g.nodes()) {
    if (node->kind() == NodeKind::kFusion) {
      ++n;
    } else if (node->kind() == NodeKind::kOp && !ir::IsView(node->op())) {
      ++n;
    }
  }
  return n;
}

std::vector<Tensor> RunReplay(const ReplayPlan& plan,
                              absl::Span<const Tensor> inputs,
                              absl::Span<const Tensor> state,
                              const RunHooks& hooks, RegionChecker* checker) {
  NoGradGuard no_grad;
  const ir::Graph& graph = *plan.graph;
  std::vector<Tensor> env(graph.num_values());
  size_t next_input = 0, next_state = 0;
  // The random state, if any, is the last input (Program::Run adds it).
  const ir::Value* random = graph.random_state();
  SJ_CHECK(random == nullptr || !inputs.empty(), "no random state bound");
  const size_t step_inputs = inputs.size() - (random != nullptr ? 1 : 0);
  if (random != nullptr) env[random->id()] = inputs.back();
  for (const ir::Value* param : graph.params()) {
    if (graph.param_kind(param) == ir::ParamKind::kInput) {
      SJ_CHECK(next_input < step_inputs, "too few inputs bound");
      env[param->id()] = inputs[next_input++];
    } else if (graph.param_kind(param) == ir::ParamKind::kState) {
      SJ_CHECK(next_state < state.size(), "too few state tensors bound");
      env[param->id()] = state[next_state++];
    }
  }
  if (random != nullptr) ++next_input;
  SJ_CHECK(next_input == inputs.size() && next_state == state.size(), "bound ",
           inputs.size(), " inputs and ", state.size(),
           " state tensors to a graph with ", next_input, " and ", next_state);
  RunContext ctx;
  ctx.plan = &plan;
  ctx.hooks = &hooks;
  ctx.checker = checker;
  RunGraph(graph, env, ctx);
  WaitPending(ctx.collective_results);
  std::vector<Tensor> out;
  for (const ir::Value* v : graph.returns()) out.push_back(env[v->id()]);
  return out;
}

}  // namespace stepjit::runtime
