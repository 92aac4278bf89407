// fuse: greedy producer-consumer grouping under the rules in fuse.h, then region outlining.
#include "passes/fuse.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/region_ops.h"
#include "ir/rewrite.h"
#include "ir/status.h"
#include "passes/gemm_epilogue.h"
#include "passes/ir_names.h"

namespace stepjit::passes {

namespace {

enum class Role { kNone, kElementwise, kReduce };

// The role comes from ir::RegionRoleOf, the rule the region code generators
// admit by (codegen::Analyze), so fuse forms only regions they can lower.
Role RoleOf(const Node* n) {
  switch (ir::RegionRoleOf(*n)) {
    case ir::RegionRole::kElementwise:
      return Role::kElementwise;
    case ir::RegionRole::kReduce:
      return Role::kReduce;
    case ir::RegionRole::kNone:
      return Role::kNone;
  }
  return Role::kNone;
}

int64_t OutNumel(const Node* n) { return ir::NumElements(n->output()->type().shape); }
int64_t IterNumel(const Node* n) {
  return RoleOf(n) == Role::kReduce ? ir::NumElements(n->inputs()[0]->type().shape)
                                    : OutNumel(n);
}

// Groups nodes by union-find, in program order: node i merges with the
// groups of its producers. Near-linear: a group keeps a summary (its
// iteration size, reductions, index range) so that merging two plain
// elementwise groups of one size needs no pass over their members, members
// move from the smaller group into the larger, and the cycle check (R4)
// starts from the consumers outside the group (kept per group) and never
// follows a node after the one being merged: every such node is still a
// group of its own, and edges only lead further on from it.
class Fuser {
 public:
  explicit Fuser(ir::Graph& g) : g_(g) {
    for (const auto& n : g.nodes()) {
      index_[n.get()] = static_cast<int>(nodes_.size());
      nodes_.push_back(n.get());
    }
    consumers_.resize(nodes_.size());
    for (size_t i = 0; i < nodes_.size(); ++i) {
      for (const Value* v : nodes_[i]->inputs()) {
        if (const Node* p = Producer(v)) consumers_[index_.at(p)].push_back(static_cast<int>(i));
      }
    }
    parent_.resize(nodes_.size());
    std::iota(parent_.begin(), parent_.end(), 0);
    members_.resize(nodes_.size());
    summary_.resize(nodes_.size());
    frontier_ = consumers_;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      members_[i] = {static_cast<int>(i)};
      const Role role = RoleOf(nodes_[i]);
      const int64_t size = role == Role::kNone ? 1 : IterNumel(nodes_[i]);
      summary_[i] = {.iter = std::max<int64_t>(size, 1),
                     .plain = role == Role::kElementwise && size >= 1,
                     .max_index = static_cast<int>(i)};
    }
  }

  void Group() {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (RoleOf(nodes_[i]) == Role::kNone) continue;
      for (const Value* v : nodes_[i]->inputs()) {
        const Node* p = Producer(v);
        if (p == nullptr || ir::IsScalarConstant(p) || RoleOf(p) == Role::kNone)
          continue;
        TryMerge(Find(static_cast<int>(i)), Find(index_.at(p)));
      }
    }
  }

  bool Outline(FuseStats* stats);

 private:
  // A group's summary, kept at its root.
  struct Summary {
    int64_t iter = 1;    // the largest iteration size of a member (>= 1)
    bool plain = false;  // elementwise only, every member of size iter or 1
    int max_index = 0;   // the last member in program order
  };

  const Node* Producer(const Value* v) const {
    const Node* p = v->producer();
    return p != nullptr && index_.contains(p) ? p : nullptr;
  }
  int Find(int i) { return parent_[i] == i ? i : parent_[i] = Find(parent_[i]); }

  // R1-R3 for the union of groups a and b, member by member (groups with a
  // reduction or of mixed sizes).
  bool ShapesLegal(const std::vector<int>& m) const {
    int reduce = -1;
    int reductions = 0;
    int64_t iter = 1;
    for (int i : m) {
      iter = std::max(iter, IterNumel(nodes_[i]));
      if (RoleOf(nodes_[i]) == Role::kReduce) {
        reduce = i;
        ++reductions;
      }
    }
    absl::flat_hash_set<int> in(m.begin(), m.end());
    return (reductions <= 1 && OneReduction(m, in, reduce, iter)) ||
           RowGroup(m, iter);
  }

  // R2 and R3 for a group of at most one reduction: every member iterates
  // over the group's size (or is 0-d), members downstream of the reduction
  // over its output.
  bool OneReduction(const std::vector<int>& m,
                    const absl::flat_hash_set<int>& in, int reduce,
                    int64_t iter) const {
    absl::flat_hash_set<int> after_reduce;
    if (reduce >= 0) {  // members downstream of the reduction, inside the group
      std::vector<int> stack = {reduce};
      while (!stack.empty()) {
        int n = stack.back();
        stack.pop_back();
        for (int c : consumers_[n]) {
          if (in.contains(c) && after_reduce.insert(c).second) stack.push_back(c);
        }
      }
    }
    for (int i : m) {
      const int64_t size = IterNumel(nodes_[i]);
      if (after_reduce.contains(i)) {
        if (size != OutNumel(nodes_[reduce]) && size != 1) return false;  // R3
      } else if (size != iter && size != 1) {
        return false;  // R2
      }
    }
    return true;
  }

  // R3 for row groups: reductions that all reduce the same rows of the
  // group's full size (ir::RowExtentOf), with work over the full size, per
  // row or 0-d before, between and after them. Rows are the unit of
  // parallelism, so a group of a single row stays apart. Integer values
  // (targets and their reshapes) are read as region inputs, not computed
  // inside: the row plan does not return them, and nodes outside that use
  // them (one_hot) would otherwise depend on the region.
  bool RowGroup(const std::vector<int>& m, int64_t iter) const {
    std::optional<ir::RowExtent> row;
    for (int i : m) {
      if (RoleOf(nodes_[i]) != Role::kReduce) continue;
      const std::optional<ir::RowExtent> r = ir::RowExtentOf(*nodes_[i]);
      if (!r || r->rows * r->row_len != iter || (row && *row != *r))
        return false;
      row = r;
    }
    if (!row || row->rows < 2) return false;
    for (int i : m) {
      const int64_t size = OutNumel(nodes_[i]);
      if (size != iter && size != row->rows && size != 1) return false;
      if (ir::IsIntegral(nodes_[i]->output()->type().dtype)) return false;
    }
    return true;
  }

  // R4: a path from groups a and b, merged, back into them through outside
  // nodes. Other groups count as single nodes (once outlined, each of their
  // outputs depends on all their inputs), so two regions never depend on
  // each other. Nodes after `last` (the one being merged) are groups of
  // their own whose consumers come later still: no path back runs there.
  bool Cycle(int a, int b) {
    const int last = std::max(summary_[a].max_index, summary_[b].max_index);
    std::vector<int> stack;
    absl::flat_hash_set<int> seen;  // roots of outside groups
    for (int r : {a, b}) {
      for (int c : frontier_[r]) {
        const int rc = Find(c);
        if (rc == a || rc == b || c > last) continue;
        if (seen.insert(rc).second) stack.push_back(rc);
      }
    }
    while (!stack.empty()) {
      const int r = stack.back();
      stack.pop_back();
      for (int x : members_[r]) {
        for (int c : consumers_[x]) {
          const int rc = Find(c);
          if (rc == a || rc == b) return true;
          if (rc == r || c > last) continue;
          if (seen.insert(rc).second) stack.push_back(rc);
        }
      }
    }
    return false;
  }

  void TryMerge(int a, int b) {
    if (a == b) return;
    const Summary& sa = summary_[a];
    const Summary& sb = summary_[b];
    Summary merged{
        .iter = std::max(sa.iter, sb.iter),
        .plain = sa.plain && sb.plain &&
                 (sa.iter == sb.iter || sa.iter == 1 || sb.iter == 1),
        .max_index = std::max(sa.max_index, sb.max_index)};
    if (!merged.plain) {
      std::vector<int> m = members_[a];
      m.insert(m.end(), members_[b].begin(), members_[b].end());
      if (!ShapesLegal(m)) return;
    }
    if (Cycle(a, b)) return;
    // The smaller group joins the larger.
    if (members_[a].size() < members_[b].size()) std::swap(a, b);
    parent_[b] = a;
    members_[a].insert(members_[a].end(), members_[b].begin(),
                       members_[b].end());
    std::vector<int>().swap(members_[b]);
    summary_[a] = merged;
    std::vector<int>& f = frontier_[a];
    f.insert(f.end(), frontier_[b].begin(), frontier_[b].end());
    std::vector<int>().swap(frontier_[b]);
    std::erase_if(f, [&](int c) { return Find(c) == a; });
  }

  ir::Graph& g_;
  std::vector<Node*> nodes_;
  absl::flat_hash_map<const Node*, int> index_;
  std::vector<std::vector<int>> consumers_;
  std::vector<int> parent_;
  std::vector<std::vector<int>> members_;
  std::vector<Summary> summary_;
  // Per group: consumers of its members, outside it when they were added
  // (entries that joined the group since are dropped at each merge).
  std::vector<std::vector<int>> frontier_;
};

bool Fuser::Outline(FuseStats* stats) {
  absl::flat_hash_set<const Node*> erased;
  absl::flat_hash_map<const Node*, int> position;  // for the final order
  for (size_t i = 0; i < nodes_.size(); ++i) position[nodes_[i]] = static_cast<int>(i);
  int region = 0;
  // R5: values used outside their region become its outputs; every reader
  // outside is rewired once, after all regions exist.
  const absl::flat_hash_set<const Value*> returned(g_.returns().begin(),
                                                   g_.returns().end());
  ir::ValueReplacer replace;
  for (size_t root = 0; root < nodes_.size(); ++root) {
    if (Find(static_cast<int>(root)) != static_cast<int>(root)) continue;
    std::vector<int> m = members_[root];
    // A chain over one element (a step counter's increment) stays as plain
    // ops: the code generators refuse it, not worth a kernel.
    if (m.size() < 2 || summary_[root].iter <= 1) continue;
    std::sort(m.begin(), m.end());
    absl::flat_hash_set<const Node*> in;
    for (int i : m) in.insert(nodes_[i]);
    auto body = std::make_unique<ir::Graph>(absl::StrCat("fused_", region));
    absl::flat_hash_map<const Value*, Value*> map;
    std::vector<Value*> outer_inputs;
    for (int i : m) {
      const Node* n = nodes_[i];
      std::vector<Value*> args;
      for (Value* v : n->inputs()) {
        auto it = map.find(v);
        if (it == map.end()) {
          const Node* p = v->producer();
          Value* inner;
          if (ir::IsScalarConstant(p)) {  // R1: copy the constant in
            inner = body->AddOp(p->op(), {}, p->attrs(), p->output()->type())->output();
          } else {
            inner = body->AddParam(absl::StrCat("p", outer_inputs.size()), v->type(),
                                   ir::ParamKind::kInput);
            outer_inputs.push_back(v);
          }
          it = map.emplace(v, inner).first;
        }
        args.push_back(it->second);
      }
      map[n->output()] = body->AddOp(n->op(), std::move(args), n->attrs(), n->output()->type())
                             ->output();
    }
    std::vector<const Value*> exported;
    for (int i : m) {
      const Value* v = nodes_[i]->output();
      bool outside = returned.contains(v);
      for (int c : consumers_[i]) outside |= !in.contains(nodes_[c]);
      if (outside) exported.push_back(v);
    }
    std::vector<Value*> body_returns;
    for (const Value* v : exported) body_returns.push_back(map.at(v));
    body->SetReturns(std::move(body_returns));
    Node* fusion = g_.AddFusion(std::move(body), std::move(outer_inputs));
    position[fusion] = m.front();
    for (size_t k = 0; k < exported.size(); ++k)
      replace.Replace(exported[k], fusion->outputs()[k]);
    erased.insert(in.begin(), in.end());
    ++region;
    if (stats) {
      ++stats->regions;
      stats->nodes_fused += static_cast<int>(m.size());
    }
  }
  if (region == 0) return false;
  replace.ApplyToGraph(g_, [&](const Node* n) { return erased.contains(n); });
  // Constants now read only inside regions are dead.
  absl::flat_hash_set<const Value*> used(g_.returns().begin(), g_.returns().end());
  for (const auto& n : g_.nodes()) {
    if (erased.contains(n.get())) continue;
    for (const Value* v : n->inputs()) used.insert(v);
  }
  g_.EraseNodesIf([&](const Node* n) {
    return erased.contains(n) ||
           (ir::IsScalarConstant(n) && !used.contains(n->output()));
  });
  // Regions sit where their first member was; a stable topological sort
  // moves whatever a region reads ahead of it. Assigns stay last, in order.
  std::vector<Node*> order;
  absl::flat_hash_map<const Node*, int> pending;
  absl::flat_hash_map<const Value*, const Node*> producer;
  absl::flat_hash_map<const Node*, std::vector<Node*>> users;
  for (const auto& n : g_.nodes()) {
    for (const Value* v : n->outputs()) producer[v] = n.get();
  }
  using Key = std::pair<std::pair<bool, int>, Node*>;
  auto key = [&](Node* n) {
    return Key{{n->kind() == NodeKind::kAssign, position.at(n)}, n};
  };
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ready;
  for (const auto& n : g_.nodes()) {
    int deps = 0;
    for (const Value* v : n->inputs()) {
      auto it = producer.find(v);
      if (it != producer.end()) {
        ++deps;
        users[it->second].push_back(n.get());
      }
    }
    pending[n.get()] = deps;
    if (deps == 0) ready.push(key(n.get()));
  }
  while (!ready.empty()) {
    Node* n = ready.top().second;
    ready.pop();
    order.push_back(n);
    for (Node* u : users[n]) {
      if (--pending[u] == 0) ready.push(key(u));
    }
  }
  g_.ReorderNodes(order);
  return true;
}

}  // namespace

absl::StatusOr<bool> FuseGraph(ir::Graph& graph, FuseStats* stats) {
  const int marked = MarkGemmEpilogues(graph);
  Fuser fuser(graph);
  fuser.Group();
  const bool outlined = fuser.Outline(stats);
  const int absorbed = AbsorbGemmEpilogues(graph);
  if (stats) {
    stats->epilogues += marked;
    stats->absorbed += absorbed;
  }
  return outlined || marked > 0 || absorbed > 0;
}

absl::StatusOr<bool> Fuse(ir::Graph& graph, PassStats& stats) {
  FuseStats f;
  ASSIGN_OR_RETURN(bool changed, FuseGraph(graph, &f));
  stats.Add("regions formed", f.regions);
  stats.Add("nodes fused", f.nodes_fused);
  stats.Add("gemm epilogues marked", f.epilogues);
  stats.Add("gemm epilogues absorbed", f.absorbed);
  return changed;
}

}  // namespace stepjit::passes
