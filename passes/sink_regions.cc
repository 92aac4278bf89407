// sink-regions: regions move down to their first user when buffers allow.
#include "passes/sink_regions.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_set.h"

namespace stepjit::passes {
namespace {

int64_t Bytes(const ir::Value* v) {
  return ir::NumElements(v->type().shape) * ir::DTypeSize(v->type().dtype);
}

bool Reads(const ir::Node* n, const ir::Value* v) {
  return std::find(n->inputs().begin(), n->inputs().end(), v) != n->inputs().end();
}

}  // namespace

absl::StatusOr<bool> SinkRegions(ir::Graph& graph, PassStats& stats) {
  std::vector<ir::Node*> order;
  for (const auto& n : graph.nodes()) order.push_back(n.get());
  const std::vector<ir::Node*> regions = [&] {
    std::vector<ir::Node*> r;
    for (ir::Node* n : order) {
      if (n->kind() == ir::NodeKind::kFusion) r.push_back(n);
    }
    return r;
  }();
  int64_t sunk = 0;
  for (auto it = regions.rbegin(); it != regions.rend(); ++it) {
    ir::Node* node = *it;
    const size_t pos = std::find(order.begin(), order.end(), node) - order.begin();
    const absl::flat_hash_set<const ir::Value*> results(node->outputs().begin(),
                                                        node->outputs().end());
    size_t target = pos + 1;
    while (target < order.size() && order[target]->kind() != ir::NodeKind::kAssign &&
           std::none_of(order[target]->inputs().begin(), order[target]->inputs().end(),
                        [&](const ir::Value* v) { return results.contains(v); })) {
      ++target;
    }
    if (target == pos + 1 || target == order.size() ||
        order[target]->kind() != ir::NodeKind::kFusion) {
      continue;
    }
    int64_t extended = 0;
    absl::flat_hash_set<const ir::Value*> seen;
    for (const ir::Value* v : node->inputs()) {
      if (graph.IsParam(v) || !seen.insert(v).second) continue;
      const bool read_later = std::any_of(order.begin() + target, order.end(),
                                          [&](const ir::Node* n) { return Reads(n, v); });
      if (!read_later) extended += Bytes(v);
    }
    if (extended > kSinkSlackBytes) continue;
    // Ahead of the regions already right before the user (they came after
    // this one), so regions keep their order.
    size_t before = target;
    while (before - 1 > pos && order[before - 1]->kind() == ir::NodeKind::kFusion) --before;
    if (before == pos + 1) continue;
    order.erase(order.begin() + pos);
    order.insert(order.begin() + (before - 1), node);
    ++sunk;
  }
  if (sunk > 0) graph.ReorderNodes(order);
  stats.Add("regions sunk", sunk);
  return sunk > 0;
}

}  // namespace stepjit::passes
