// Program: an interpreter over the IR that dispatches each node to the eager kernels.
#include "runtime/executor.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/dispatch.h"
#include "runtime/generator.h"

namespace stepjit::runtime {

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

// Values the eager step would have drawn: each random node of a replay takes
// a fresh slice of the default generator's stream. Nodes that shared an
// offset when traced (dropout and its backward) share the new one.
class RandomRemap {
 public:
  ir::Attrs Apply(const ir::Node& node, absl::Span<const Tensor> inputs) {
    ir::Attrs attrs = node.attrs();
    const int64_t traced = attrs.GetInt(AttrKey::kOffset);
    auto it = offsets_.find(traced);
    if (it == offsets_.end()) {
      const ir::OpId op = node.op();
      int64_t n = op == ir::OpId::kDropout ? inputs[0].numel()
                                           : ir::NumElements(node.output()->type().shape);
      if (op == ir::OpId::kRandn) n *= 2;
      it = offsets_.emplace(traced, static_cast<int64_t>(
                                        default_generator().Reserve(static_cast<uint64_t>(n))))
               .first;
    }
    attrs.Set(AttrKey::kOffset, it->second);
    return attrs;
  }

 private:
  absl::flat_hash_map<int64_t, int64_t> offsets_;
};

using LastUseMap = absl::flat_hash_map<const ir::Graph*, std::vector<std::vector<int>>>;

void CollectLastUses(const ir::Graph& g, LastUseMap& out) {
  out[&g] = LastUses(g);
  for (const auto& n : g.nodes()) {
    if (n->kind() == NodeKind::kFusion) CollectLastUses(*n->body(), out);
  }
}

void RunGraph(const ir::Graph& g, std::vector<Tensor>& env, RandomRemap& random,
              const LastUseMap& last_use_map) {
  const std::vector<std::vector<int>>& last_uses = last_use_map.at(&g);
  for (size_t pos = 0; pos < g.nodes().size(); ++pos) {
    const ir::Node* node = g.nodes()[pos].get();
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
        if (ir::GetOpInfo(node->op()).kind == ir::OpKind::kRandom) {
          env[node->output()->id()] = Dispatch(node->op(), in, random.Apply(*node, in));
        } else {
          env[node->output()->id()] = Dispatch(node->op(), in, node->attrs());
        }
        break;
      }
      case NodeKind::kFusion: {
        const ir::Graph& body = *node->body();
        std::vector<Tensor> inner(body.num_values());
        for (size_t i = 0; i < body.params().size(); ++i) inner[body.params()[i]->id()] = in[i];
        RunGraph(body, inner, random, last_use_map);
        for (size_t i = 0; i < node->outputs().size(); ++i) {
          env[node->outputs()[i]->id()] = inner[body.returns()[i]->id()];
        }
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
  }
}

}  // namespace

absl::StatusOr<Program> Program::Build(const ir::Graph& graph) {
  Program p(&graph);
  p.kernels_per_run_ = CountKernels(graph);
  CollectLastUses(graph, p.last_uses_);
  return p;
}

std::vector<Tensor> Program::Run(absl::Span<const Tensor> inputs,
                                 absl::Span<const Tensor> state) const {
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
  RandomRemap random;
  RunGraph(*graph_, env, random, last_uses_);
  std::vector<Tensor> out;
  for (const ir::Value* v : graph_->returns()) out.push_back(env[v->id()]);
  return out;
}

}  // namespace stepjit::runtime
