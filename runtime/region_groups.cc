// Grouping consecutive independent regions for multi-region launches.
#include "runtime/region_groups.h"

#include "absl/container/flat_hash_set.h"

namespace stepjit::runtime {

std::vector<std::vector<const ir::Node*>> IndependentRegionRuns(
    const ir::Graph& g, const absl::flat_hash_map<const ir::Node*, int64_t>& arg_bytes,
    int64_t max_arg_bytes) {
  std::vector<std::vector<const ir::Node*>> runs;
  std::vector<const ir::Node*> run;
  absl::flat_hash_set<const ir::Value*> produced;  // by the run's members
  int64_t bytes = 0;
  auto close = [&] {
    if (run.size() >= 2) runs.push_back(run);
    run.clear();
    produced.clear();
    bytes = 0;
  };
  for (const auto& n : g.nodes()) {
    auto it = arg_bytes.find(n.get());
    if (it == arg_bytes.end()) {
      close();
      continue;
    }
    bool joins = bytes + it->second <= max_arg_bytes;
    for (const ir::Value* v : n->inputs()) joins &= !produced.contains(v);
    if (!joins) close();
    run.push_back(n.get());
    bytes += it->second;
    for (const ir::Value* v : n->outputs()) produced.insert(v);
  }
  close();
  return runs;
}

}  // namespace stepjit::runtime
