// gemm-bgrad: finds a marked matmul's bias-gradient sum, checks it may move,
// and rewrites the matmul, the sum (or its region) and the node order.
#include "passes/gemm_bgrad.h"

#include <optional>
#include <queue>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "ir/gemm_epilogue.h"
#include "ir/rewrite.h"
#include "ir/status.h"
#include "passes/region_split.h"

namespace stepjit::passes {

using ir::AttrKey;
using ir::Node;
using ir::NodeKind;
using ir::OpId;
using ir::Value;

namespace {

bool IsOp(const Node* n, OpId op) {
  return n != nullptr && n->kind() == NodeKind::kOp && n->op() == op;
}

// What the bias-gradient sum of a candidate matmul looks like.
struct Want {
  Value* dy;            // the matmul's left operand
  int64_t kdim;         // dy's dim op() turns into k
  ir::TensorType grad;  // the sum without keepdim: [m]
  ir::TensorType kept;  // with keepdim: dy's shape, k dim 1
};

// A 2-D matmul marked "bgrad" and not yet absorbed.
std::optional<Want> Candidate(const Node* mm) {
  if (!IsOp(mm, OpId::kMatmul) || mm->inputs().size() != 2 ||
      mm->outputs().size() != 1 ||
      ir::GemmEpilogueOf(mm->attrs()).kind != ir::GemmEpilogueKind::kBgrad) {
    return std::nullopt;
  }
  const ir::TensorType& a = mm->inputs()[0]->type();
  if (a.shape.size() != 2 || mm->inputs()[1]->type().shape.size() != 2) {
    return std::nullopt;
  }
  const int64_t kdim = mm->attrs().GetBool(AttrKey::kTransposeA) ? 0 : 1;
  ir::Shape kept = a.shape;
  kept[kdim] = 1;
  return Want{
      mm->inputs()[0], kdim, {a.dtype, {a.shape[1 - kdim]}}, {a.dtype, kept}};
}

// `n` sums `v` over the k dim into the matmul's dtype.
bool SumsOverK(const Node* n, const Value* v, const Want& w) {
  if (!IsOp(n, OpId::kSum) || n->inputs()[0] != v) return false;
  absl::StatusOr<std::vector<int64_t>> dims =
      ir::NormalizeDims(n->attrs().GetInts(AttrKey::kDims), 2);
  const ir::TensorType& t = n->output()->type();
  return dims.ok() && *dims == std::vector<int64_t>{w.kdim} &&
         (t == w.grad || t == w.kept);
}

// A sum to absorb: standing alone, or in the body of `region`.
struct Site {
  Node* region = nullptr;
  const Node* sum = nullptr;
};

bool FlatBody(const ir::Graph& body) {
  for (const auto& n : body.nodes()) {
    if (n->kind() != NodeKind::kOp) return false;
  }
  return true;
}

std::vector<Site> FindSums(const ir::Graph& g, const Want& w) {
  std::vector<Site> sites;
  for (const auto& n : g.nodes()) {
    if (SumsOverK(n.get(), w.dy, w)) sites.push_back({nullptr, n.get()});
    if (n->kind() != NodeKind::kFusion || !FlatBody(*n->body())) continue;
    const ir::Graph& body = *n->body();
    // dy inside the body: a parameter it feeds, or the result it is.
    std::vector<const Value*> inner;
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      if (n->inputs()[i] == w.dy) inner.push_back(body.params()[i]);
    }
    if (w.dy->producer() == n.get()) {
      inner.push_back(body.returns()[w.dy->index()]);
    }
    for (const auto& b : body.nodes()) {
      for (const Value* v : inner) {
        if (SumsOverK(b.get(), v, w)) sites.push_back({n.get(), b.get()});
      }
    }
  }
  return sites;
}

// The top-level nodes `mm` depends on, itself included.
absl::flat_hash_set<const Node*> Ancestors(const Node* mm) {
  absl::flat_hash_set<const Node*> seen = {mm};
  std::vector<const Node*> stack = {mm};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const Value* v : n->inputs()) {
      const Node* p = v->producer();
      if (p != nullptr && seen.insert(p).second) stack.push_back(p);
    }
  }
  return seen;
}

// No cycle: the matmul must not depend on the sum, nor on a region result
// computed after it.
bool Legal(const Site& s, const Node* mm) {
  const absl::flat_hash_set<const Node*> ancestors = Ancestors(mm);
  if (s.region == nullptr) return !ancestors.contains(s.sum);
  const absl::flat_hash_set<const Node*> after =
      DownstreamOf(*s.region->body(), s.sum);
  absl::flat_hash_set<const Value*> late;
  for (size_t i = 0; i < s.region->outputs().size(); ++i) {
    const Node* p = s.region->body()->returns()[i]->producer();
    if (after.contains(p)) late.insert(s.region->outputs()[i]);
  }
  for (const Node* n : ancestors) {
    if (n == s.region) continue;
    for (const Value* v : n->inputs()) {
      if (late.contains(v)) return false;
    }
  }
  return true;
}

using Priority = std::pair<int, int>;  // (position, order among new nodes)

// A stable topological order: each node as close to its priority as its
// operands allow; assigns last, in their order.
void Reorder(ir::Graph& g,
             const absl::flat_hash_map<const Node*, Priority>& priority) {
  absl::flat_hash_map<const Value*, Node*> producer;
  for (const auto& n : g.nodes()) {
    for (const Value* v : n->outputs()) producer[v] = n.get();
  }
  absl::flat_hash_map<const Node*, int> pending;
  absl::flat_hash_map<const Node*, std::vector<Node*>> users;
  using Key = std::tuple<bool, Priority, Node*>;
  auto key = [&](Node* n) {
    return Key{n->kind() == NodeKind::kAssign, priority.at(n), n};
  };
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ready;
  for (const auto& n : g.nodes()) {
    int deps = 0;
    for (const Value* v : n->inputs()) {
      if (auto it = producer.find(v); it != producer.end()) {
        ++deps;
        users[it->second].push_back(n.get());
      }
    }
    pending[n.get()] = deps;
    if (deps == 0) ready.push(key(n.get()));
  }
  std::vector<Node*> order;
  while (!ready.empty()) {
    Node* n = std::get<2>(ready.top());
    ready.pop();
    order.push_back(n);
    for (Node* u : users[n]) {
      if (--pending[u] == 0) ready.push(key(u));
    }
  }
  SJ_CHECK(order.size() == g.nodes().size(),
           "gemm-bgrad: the rewritten graph has a cycle");
  g.ReorderNodes(order);
}

void Absorb(ir::Graph& g, Node* mm, const Want& w, const Site& s) {
  absl::flat_hash_map<const Node*, Priority> priority;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    priority[g.nodes()[i].get()] = {static_cast<int>(i), 0};
  }
  const int at = priority.at(mm).first;
  Node* nm = g.AddOp(OpId::kMatmul, mm->inputs(), mm->attrs(),
                     std::vector<ir::TensorType>{mm->output()->type(), w.grad});
  priority[nm] = {at, 0};
  Value* grad = nm->outputs()[1];
  // The sum's value outside: the gradient, or its keepdim view.
  Value* sum_value = grad;
  if (s.sum->output()->type() == w.kept) {
    Node* view = g.AddOp(
        OpId::kReshape, {grad},
        ir::Attrs{{AttrKey::kShape, std::vector<int64_t>(w.kept.shape.begin(),
                                                         w.kept.shape.end())}},
        w.kept);
    priority[view] = {at, 1};
    sum_value = view->output();
  }
  ir::ValueReplacer replace;
  replace.Replace(mm->output(), nm->output());
  const Node* erased = s.sum;
  if (s.region == nullptr) {
    replace.Replace(s.sum->output(), sum_value);
  } else {
    const RegionSplit split =
        SplitRegionAtReduction(g, *s.region, s.sum, grad, sum_value);
    SJ_CHECK(split.results.size() == s.region->outputs().size());
    if (split.before != nullptr) {
      priority[split.before] = {priority.at(s.region).first, 0};
    }
    if (split.after != nullptr) priority[split.after] = {at, 2};
    for (size_t i = 0; i < split.results.size(); ++i) {
      replace.Replace(s.region->outputs()[i], split.results[i]);
    }
    erased = s.region;
  }
  g.EraseNodesIf([&](const Node* n) { return n == mm || n == erased; });
  bool view_read = false;
  for (const auto& n : g.nodes()) {
    replace.ApplyTo(*n);
    for (const Value* v : n->inputs()) view_read |= v == sum_value;
  }
  replace.ApplyToReturns(g);
  for (const Value* v : g.returns()) view_read |= v == sum_value;
  // A keepdim view nobody reads (a region's reshape read the gradient).
  if (sum_value != grad && !view_read) {
    g.EraseNodesIf([&](const Node* n) { return n == sum_value->producer(); });
  }
  Reorder(g, priority);
}

}  // namespace

int AbsorbGemmBiasGrads(ir::Graph& g) {
  std::vector<Node*> matmuls;
  for (const auto& n : g.nodes()) {
    if (Candidate(n.get())) matmuls.push_back(n.get());
  }
  int absorbed = 0;
  for (Node* mm : matmuls) {
    const Want w = *Candidate(mm);
    for (const Site& s : FindSums(g, w)) {
      if (!Legal(s, mm)) continue;
      Absorb(g, mm, w, s);
      ++absorbed;
      break;
    }
  }
  return absorbed;
}

absl::StatusOr<bool> GemmBiasGradPass(ir::Graph& graph, PassStats& stats) {
  const int absorbed = AbsorbGemmBiasGrads(graph);
  stats.Add("gemm bias-gradients absorbed", absorbed);
  return absorbed > 0;
}

}  // namespace stepjit::passes
