// ValueReplacer: the recorded replacements applied to inputs and returns.
#include "ir/rewrite.h"

#include <utility>
#include <vector>

namespace stepjit::ir {

Value* ValueReplacer::Resolve(Value* v) const {
  for (auto it = map_.find(v); it != map_.end(); it = map_.find(v)) {
    v = it->second;
  }
  return v;
}

bool ValueReplacer::ApplyTo(Node& node) const {
  if (map_.empty()) return false;
  bool changed = false;
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    Value* to = Resolve(node.inputs()[i]);
    if (to != node.inputs()[i]) {
      node.ReplaceInput(static_cast<int>(i), to);
      changed = true;
    }
  }
  return changed;
}

bool ValueReplacer::ApplyToReturns(Graph& graph) const {
  if (map_.empty()) return false;
  std::vector<Value*> returns = graph.returns();
  bool changed = false;
  for (Value*& v : returns) {
    Value* to = Resolve(v);
    changed |= to != v;
    v = to;
  }
  if (changed) graph.SetReturns(std::move(returns));
  return changed;
}

bool ValueReplacer::ApplyToGraph(
    Graph& graph, absl::FunctionRef<bool(const Node*)> skip) const {
  if (map_.empty()) return false;
  bool changed = false;
  for (const auto& n : graph.nodes()) {
    if (!skip(n.get())) changed |= ApplyTo(*n);
  }
  changed |= ApplyToReturns(graph);
  return changed;
}

}  // namespace stepjit::ir
