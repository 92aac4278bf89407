// bucket-plan: async all_reduce launches move up, their readers move down.
#include "passes/bucket_plan.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/op_attrs.h"

namespace stepjit::passes {
namespace {

bool IsAsyncAllReduce(const ir::Node* n) {
  return n->kind() == ir::NodeKind::kOp && n->op() == ir::OpId::kAllReduce &&
         n->attrs().GetBool(ir::AttrKey::kAsync);
}

bool Launches(const ir::Node* n) {
  switch (n->kind()) {
    case ir::NodeKind::kAssign:
      return false;
    case ir::NodeKind::kFusion:
      return true;
    case ir::NodeKind::kOp:
      return !ir::IsView(n->op());
  }
  return false;
}

class Scheduler {
 public:
  explicit Scheduler(ir::Graph& graph) : graph_(graph) {
    for (const auto& n : graph.nodes()) order_.push_back(n.get());
    for (const auto& n : graph.nodes()) {
      for (const ir::Value* v : n->inputs()) ++uses_[v];
    }
    for (const ir::Value* r : graph.returns()) ++uses_[r];
  }

  size_t Pos(const ir::Node* n) const {
    return std::find(order_.begin(), order_.end(), n) - order_.begin();
  }

  // Position right after the last producer of `n`'s operands (0 if all are
  // parameters).
  size_t Earliest(const ir::Node* n) const {
    size_t earliest = 0;
    for (const ir::Value* v : n->inputs()) {
      if (v->producer() != nullptr)
        earliest = std::max(earliest, Pos(v->producer()) + 1);
    }
    return earliest;
  }

  // Moves `n` up to right after its operands, first hoisting the views and
  // cat that feed only it. Never across another collective: ranks must issue
  // collectives in one order.
  void Hoist(ir::Node* n) {
    for (const ir::Value* v : n->inputs()) {
      ir::Node* p = v->producer();
      if (p == nullptr || p->kind() != ir::NodeKind::kOp || uses_[v] != 1)
        continue;
      if (ir::IsView(p->op()) || p->op() == ir::OpId::kCat) Hoist(p);
    }
    size_t target = Earliest(n);
    const size_t pos = Pos(n);
    for (size_t i = pos; i-- > target;) {
      if (order_[i]->kind() == ir::NodeKind::kOp &&
          ir::IsCollective(order_[i]->op())) {
        target = i + 1;
        break;
      }
    }
    if (target >= pos) return;
    order_.erase(order_.begin() + pos);
    order_.insert(order_.begin() + target, n);
    ++moved_;
  }

  // Moves `n` down to just before the first node that reads one of its
  // results (or writes state back), never across a collective or another
  // node in `waits` (the readers of async results keep their order, so that
  // a second run moves nothing).
  void Sink(ir::Node* n, const absl::flat_hash_set<const ir::Node*>& waits) {
    const size_t pos = Pos(n);
    const absl::flat_hash_set<const ir::Value*> results(n->outputs().begin(),
                                                        n->outputs().end());
    size_t target = pos + 1;
    while (target < order_.size()) {
      const ir::Node* m = order_[target];
      if (m->kind() == ir::NodeKind::kAssign) break;
      if (m->kind() == ir::NodeKind::kOp && ir::IsCollective(m->op())) break;
      if (waits.contains(m)) break;
      if (std::any_of(m->inputs().begin(), m->inputs().end(),
                      [&](const ir::Value* v) { return results.contains(v); }))
        break;
      // In-place updates write state others may read: keep their order.
      if (n->kind() == ir::NodeKind::kOp && ir::IsInplace(n->op()) &&
          !m->inputs().empty() && !n->inputs().empty() &&
          m->inputs()[0] == n->inputs()[0])
        break;
      ++target;
    }
    // A returned result has no reader to wait for: leave it be.
    for (const ir::Value* r : graph_.returns()) {
      if (results.contains(r)) return;
    }
    if (target <= pos + 1) return;
    order_.erase(order_.begin() + pos);
    order_.insert(order_.begin() + (target - 1), n);
    ++moved_;
  }

  std::vector<ir::Node*>& order() { return order_; }
  int64_t moved() const { return moved_; }

 private:
  ir::Graph& graph_;
  std::vector<ir::Node*> order_;
  absl::flat_hash_map<const ir::Value*, int> uses_;
  int64_t moved_ = 0;
};

// Calls `on_reader(i)` for each node from position `from` on that reads `v`
// or a view of it (the views themselves only widen what counts as `v`),
// until it returns false.
template <typename OnReader>
void ForEachReader(const std::vector<ir::Node*>& order, size_t from,
                   const ir::Value* v, OnReader on_reader) {
  absl::flat_hash_set<const ir::Value*> aliases = {v};
  for (size_t i = from; i < order.size(); ++i) {
    const ir::Node* m = order[i];
    const bool reads =
        std::any_of(m->inputs().begin(), m->inputs().end(),
                    [&](const ir::Value* x) { return aliases.contains(x); });
    if (!reads) continue;
    if (m->kind() == ir::NodeKind::kOp && ir::IsView(m->op())) {
      aliases.insert(m->output());
      continue;
    }
    if (!on_reader(i)) return;
  }
}

// The position of the first node after `from` that reads `v` or a view of it.
size_t FirstReader(const std::vector<ir::Node*>& order, size_t from,
                   const ir::Value* v) {
  size_t first = order.size();
  ForEachReader(order, from + 1, v, [&](size_t i) {
    first = i;
    return false;
  });
  return first;
}

// The non-view readers of `v` (through views of it).
std::vector<ir::Node*> Readers(const std::vector<ir::Node*>& order,
                               const ir::Value* v) {
  std::vector<ir::Node*> out;
  ForEachReader(order, 0, v, [&](size_t i) {
    out.push_back(order[i]);
    return true;
  });
  return out;
}

}  // namespace

absl::StatusOr<bool> PlanBuckets(ir::Graph& graph, PassStats& stats) {
  std::vector<ir::Node*> launches;
  for (const auto& n : graph.nodes()) {
    if (IsAsyncAllReduce(n.get())) launches.push_back(n.get());
  }
  if (launches.empty()) return false;
  Scheduler s(graph);
  for (ir::Node* n : launches) s.Hoist(n);
  // Readers sink last-first, so that each one's own readers have moved.
  std::vector<std::vector<ir::Node*>> readers;
  absl::flat_hash_set<const ir::Node*> waits;
  for (ir::Node* n : launches) {
    readers.push_back(Readers(s.order(), n->output()));
    waits.insert(readers.back().begin(), readers.back().end());
  }
  for (const std::vector<ir::Node*>& of_launch : readers) {
    for (auto it = of_launch.rbegin(); it != of_launch.rend(); ++it) {
      if ((*it)->kind() != ir::NodeKind::kAssign) s.Sink(*it, waits);
    }
  }
  int64_t bucket = 0, overlapped_total = 0;
  bool changed = s.moved() > 0;
  for (ir::Node* n : launches) {
    const std::vector<ir::Node*>& order = s.order();
    const size_t pos = s.Pos(n);
    const size_t first = FirstReader(order, pos, n->output());
    int64_t overlapped = 0;
    for (size_t i = pos + 1; i < first && i < order.size(); ++i)
      overlapped += Launches(order[i]);
    const ir::Value* flat = n->inputs()[0];
    int64_t grads = 1;
    if (const ir::Node* p = flat->producer(); p != nullptr &&
                                              p->kind() == ir::NodeKind::kOp &&
                                              p->op() == ir::OpId::kCat)
      grads = static_cast<int64_t>(p->inputs().size());
    const int64_t bytes =
        ir::NumElements(flat->type().shape) * ir::DTypeSize(flat->type().dtype);
    const std::string plan =
        absl::StrCat(grads, " grads, ", bytes, " bytes, ", overlapped,
                     " kernels before the first wait");
    ir::Attrs& attrs = n->mutable_attrs();
    if (ir::GetAttr<ir::OpId::kAllReduce, ir::AttrKey::kBucket>(attrs) !=
            bucket ||
        attrs.GetString(ir::AttrKey::kBucketPlan) != plan) {
      attrs.Set(ir::AttrKey::kBucket, bucket);
      attrs.Set(ir::AttrKey::kBucketPlan, plan);
      changed = true;
    }
    overlapped_total += overlapped;
    ++bucket;
  }
  if (s.moved() > 0) graph.ReorderNodes(s.order());
  stats.Add("buckets", bucket);
  stats.Add("nodes moved", s.moved());
  stats.Add("kernels overlapped", overlapped_total);
  return changed;
}

}  // namespace stepjit::passes
