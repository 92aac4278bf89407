// dce: a backward walk per graph marks live values; removable dead nodes go.
#include "passes/dce.h"

#include "absl/container/flat_hash_set.h"

namespace stepjit::passes {
namespace {

bool MayRemove(const ir::Node& node) {
  switch (node.kind()) {
    case ir::NodeKind::kAssign:
      return false;
    case ir::NodeKind::kFusion:
      return true;
    case ir::NodeKind::kOp:
      return ir::IsPure(node.op()) || ir::IsInplace(node.op());
  }
  return false;
}

// Removes the dead nodes of `graph` and of its live fusions' bodies;
// returns how many.
int64_t RemoveDead(ir::Graph& graph) {
  absl::flat_hash_set<const ir::Value*> live(graph.returns().begin(),
                                             graph.returns().end());
  absl::flat_hash_set<const ir::Node*> dead;
  int64_t removed = 0;
  const auto& nodes = graph.nodes();
  // Program order is a topological order, so one backward walk sees every
  // use of a value before its definition.
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    ir::Node& node = **it;
    bool used = !MayRemove(node);
    for (const ir::Value* out : node.outputs()) used |= live.contains(out);
    if (!used) {
      dead.insert(&node);
      continue;
    }
    live.insert(node.inputs().begin(), node.inputs().end());
    if (node.kind() == ir::NodeKind::kFusion) {
      removed += RemoveDead(*node.body());
    }
  }
  removed += static_cast<int64_t>(dead.size());
  if (!dead.empty()) {
    graph.EraseNodesIf([&](const ir::Node* n) { return dead.contains(n); });
  }
  return removed;
}

}  // namespace

absl::StatusOr<bool> EliminateDeadCode(ir::Graph& graph, PassStats& stats) {
  const int64_t removed = RemoveDead(graph);
  stats.Add("nodes removed", removed);
  return removed > 0;
}

}  // namespace stepjit::passes
