// autocast-*: low-precision copies for kLower ops, f32 for kFp32 ops, gradients
// cast back where computed.
#include "passes/autocast.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/infer.h"
#include "ir/rewrite.h"
#include "ir/status.h"
#include "passes/amp_graph.h"
#include "passes/ir_names.h"

namespace stepjit::passes {

using amp_graph::Builder;
using amp_graph::GradientRoots;
using amp_graph::IsExactWidening;
using amp_graph::RequireUnfused;

absl::StatusOr<bool> AutocastGraph(ir::Graph& g, DType low, PassStats& stats) {
  RETURN_IF_ERROR(RequireUnfused(g, "autocast"));
  absl::flat_hash_map<const Value*, DType> traced;
  for (const Value* p : g.params()) traced[p] = p->type().dtype;
  std::vector<Node*> original;
  for (const auto& n : g.nodes()) {
    original.push_back(n.get());
    for (const Value* v : n->outputs()) traced[v] = v->type().dtype;
  }
  std::vector<Node*> order, assigns;  // assigns stay last
  Builder b(g, order);
  absl::flat_hash_map<std::pair<Value*, DType>, Value*> casts;
  int64_t inserted = 0, retyped = 0;
  auto cast = [&](Value* v, DType to) -> absl::StatusOr<Value*> {
    auto key = std::make_pair(v, to);
    if (auto it = casts.find(key); it != casts.end()) return it->second;
    ASSIGN_OR_RETURN(Value * c, b.Cast(v, to));
    ++inserted;
    casts[key] = c;
    return c;
  };
  // A gradient keeps its leaf's dtype, as the backward of eager autocast's
  // cast gives it: where its low-precision producer computes it, it is cast
  // back, and every use (the returned .grad, clip_grad_norm_, the
  // optimizer) reads that copy, so their math runs in f32.
  const absl::flat_hash_set<const Value*> gradients = GradientRoots(g);
  ir::ValueReplacer restored;
  for (Node* n : original) {
    restored.ApplyTo(*n);
    if (n->kind() == NodeKind::kAssign) {
      Value* state = n->inputs()[0];
      Value* v = n->inputs()[1];
      if (v->type().dtype != state->type().dtype) {
        ASSIGN_OR_RETURN(Value * c, cast(v, state->type().dtype));
        n->ReplaceInput(1, c);
      }
      assigns.push_back(n);
      continue;
    }
    const ir::AmpPolicy policy = ir::GetOpInfo(n->op()).amp;
    if (policy == ir::AmpPolicy::kLower || policy == ir::AmpPolicy::kFp32) {
      const DType target = policy == ir::AmpPolicy::kLower ? low : DType::kF32;
      for (size_t i = 0; i < n->inputs().size(); ++i) {
        Value* v = n->inputs()[i];
        const DType t = v->type().dtype;
        if (ir::IsFloating(t) && t != DType::kF64 && t != target) {
          ASSIGN_OR_RETURN(Value * c, cast(v, target));
          n->ReplaceInput(static_cast<int>(i), c);
        }
      }
    }
    std::vector<TensorType> types;
    for (const Value* v : n->inputs()) types.push_back(v->type());
    absl::StatusOr<TensorType> out = ir::InferType(n->op(), types, n->attrs());
    if (!out.ok()) {
      return absl::InternalError(
          absl::StrCat("autocast: re-inferring ", ir::OpName(n->op()),
                       " failed: ", out.status().message()));
    }
    if (!(*out == n->output()->type())) {
      n->output()->set_type(*out);
      ++retyped;
    }
    order.push_back(n);
    for (Value* v : n->outputs()) {
      const DType now = v->type().dtype, was = traced.at(v);
      if (!gradients.contains(v) || now == was) continue;
      ASSIGN_OR_RETURN(Value * copy, cast(v, was));
      restored.Replace(v, copy);
      // A matmul reading the copy reads `v` itself: narrowing undoes the cast.
      if (IsExactWidening(now, was)) casts[std::make_pair(copy, now)] = v;
    }
  }
  restored.ApplyToReturns(g);
  // The step's other results (the loss) keep the dtypes the f32 step had.
  std::vector<Value*> rets = g.returns();
  for (Value*& r : rets) {
    auto it = traced.find(r);
    if (it != traced.end() && r->type().dtype != it->second) {
      ASSIGN_OR_RETURN(r, cast(r, it->second));
    }
  }
  g.SetReturns(std::move(rets));
  order.insert(order.end(), assigns.begin(), assigns.end());
  g.ReorderNodes(order);
  stats.Add("casts inserted", inserted);
  stats.Add("values retyped", retyped);
  return inserted > 0;
}

absl::StatusOr<bool> AutocastBf16(ir::Graph& g, PassStats& stats) {
  return AutocastGraph(g, DType::kBF16, stats);
}
absl::StatusOr<bool> AutocastF16(ir::Graph& g, PassStats& stats) {
  return AutocastGraph(g, DType::kF16, stats);
}

}  // namespace stepjit::passes
