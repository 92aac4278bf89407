// Mixed-precision graph helpers: node appender, gradient seeds and gradient
// roots.
#include "passes/amp_graph.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "ir/infer.h"
#include "ir/status.h"
#include "passes/ir_names.h"

namespace stepjit::passes::amp_graph {

absl::StatusOr<Value*> Builder::Op(OpId op, std::vector<Value*> in,
                                   ir::Attrs attrs) {
  std::vector<TensorType> types;
  for (const Value* v : in) types.push_back(v->type());
  ASSIGN_OR_RETURN(TensorType t, ir::InferType(op, types, attrs));
  Node* n = g_.AddOp(op, std::move(in), std::move(attrs), t);
  order_.push_back(n);
  return n->output();
}

absl::StatusOr<Value*> Builder::Const(double value, DType dtype) {
  return Op(OpId::kFull, {},
            {{AttrKey::kShape, std::vector<int64_t>{}},
             {AttrKey::kValue, value},
             {AttrKey::kDTypeAttr, dtype}});
}

absl::StatusOr<Value*> Builder::Cast(Value* v, DType to) {
  return Op(OpId::kCast, {v}, {{AttrKey::kDTypeAttr, to}});
}

bool IsExactWidening(DType from, DType to) {
  return (from == DType::kF16 || from == DType::kBF16) &&
         (to == DType::kF32 || to == DType::kF64);
}

std::vector<const Node*> GradSeeds(const ir::Graph& g) {
  std::vector<const Node*> seeds;
  for (const auto& n : g.nodes()) {
    if (n->kind() == NodeKind::kOp && n->op() == OpId::kFull &&
        n->attrs().GetString(AttrKey::kRole) == kGradSeedRole) {
      seeds.push_back(n.get());
    }
  }
  return seeds;
}

absl::flat_hash_set<const Value*> GradientRoots(const ir::Graph& g) {
  absl::flat_hash_set<const Value*> seeds;
  for (const Node* seed : GradSeeds(g)) seeds.insert(seed->output());
  if (seeds.empty()) return {};
  absl::flat_hash_set<const Value*> tainted = seeds;
  for (const auto& n : g.nodes()) {
    for (const Value* v : n->inputs()) {
      if (tainted.contains(v)) {
        tainted.insert(n->outputs().begin(), n->outputs().end());
        break;
      }
    }
  }
  absl::flat_hash_set<const Value*> roots;
  for (const Value* r : g.returns()) {
    const Value* v = r;
    for (const Node* p = v->producer();
         p != nullptr && p->kind() == NodeKind::kOp && ir::IsInplace(p->op());
         p = v->producer()) {
      v = p->inputs()[0];
    }
    if (v->producer() != nullptr && tainted.contains(v) && !seeds.contains(v))
      roots.insert(v);
  }
  absl::flat_hash_set<const Value*> from_roots, gradients;
  for (const auto& n : g.nodes()) {
    bool reads_root = false;
    for (const Value* v : n->inputs())
      reads_root |= roots.contains(v) || from_roots.contains(v);
    for (const Value* out : n->outputs()) {
      if (reads_root)
        from_roots.insert(out);
      else if (roots.contains(out))
        gradients.insert(out);
    }
  }
  return gradients;
}

absl::Status RequireUnfused(const ir::Graph& g, absl::string_view pass) {
  for (const auto& n : g.nodes()) {
    if (n->kind() == NodeKind::kFusion) {
      return absl::FailedPreconditionError(
          absl::StrCat(pass, " runs on traced graphs, before fuse; @", g.name(),
                       " has fusion regions"));
    }
  }
  return absl::OkStatus();
}

}  // namespace stepjit::passes::amp_graph
