// Dimension coalescing (see coalesce.h).
#include "codegen/coalesce.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "codegen/region_plan.h"
#include "ir/infer.h"
#include "ir/op.h"

namespace stepjit::codegen {
namespace {

using ir::AttrKey;
using ir::Node;
using ir::OpId;
using ir::Shape;
using ir::Value;

// `shape` aligned to rank `rank` from the right (leading 1s).
Shape Aligned(const Shape& shape, size_t rank) {
  Shape out(rank - shape.size(), 1);
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

bool Rewritable(const Node& n) {
  if (n.kind() != ir::NodeKind::kOp) return false;
  const OpId op = n.op();
  const ir::OpKind kind = ir::GetOpInfo(op).kind;
  if (op == OpId::kFull) return n.output()->type().shape.empty();
  if (op == OpId::kSum || op == OpId::kMean || op == OpId::kAmax) return true;
  return kind == ir::OpKind::kElementwise ||
         kind == ir::OpKind::kInplaceUpdate || op == OpId::kCast ||
         op == OpId::kWhere || ir::IsOrderedView(op);
}

// The reduced F dims of reduction `n` (its dims aligned to F's rank).
std::optional<std::vector<bool>> ReducedDims(const Node& n, size_t rank) {
  const Shape& in = n.inputs()[0]->type().shape;
  absl::StatusOr<std::vector<int64_t>> dims = ir::NormalizeDims(
      n.attrs().GetInts(AttrKey::kDims), static_cast<int64_t>(in.size()));
  if (!dims.ok()) return std::nullopt;
  std::vector<bool> reduced(rank, false);
  const size_t offset = rank - in.size();
  if (dims->empty()) {  // all of its input's dims
    for (size_t d = offset; d < rank; ++d) reduced[d] = true;
  } else {
    for (int64_t d : *dims) reduced[offset + static_cast<size_t>(d)] = true;
  }
  return reduced;
}

// Which values get coalesced shapes. F-space values are aligned with the
// region's full shape F from the right. Foreign values keep their shapes:
// what a view makes (a reduced [1, C, 1, 1] reshaped to [C]), a reduction's
// result without its reduced dims, and what is computed from them. 0-d
// values are neither. A node mixing the two kinds is not rewritten.
struct Spaces {
  absl::flat_hash_set<const Value*> foreign;  // node results
  absl::flat_hash_set<const Value*> f_params, foreign_params;
  std::vector<const Node*> reductions;
  size_t rank = 0;  // of F
};

std::optional<Spaces> Classify(const ir::Graph& body) {
  Spaces s;
  for (const auto& n : body.nodes()) {
    if (!Rewritable(*n)) return std::nullopt;
    const OpId op = n->op();
    const bool view = ir::IsOrderedView(op);
    bool any_foreign = false;
    for (const Value* v : n->inputs())
      any_foreign |= s.foreign.contains(v) && !v->type().shape.empty();
    if (ir::IsFusedReduction(op) && any_foreign) return std::nullopt;
    for (const Value* v : n->inputs()) {
      if (v->type().shape.empty()) continue;
      if (v->producer() == nullptr) {
        (any_foreign ? s.foreign_params : s.f_params).insert(v);
      } else if (any_foreign != s.foreign.contains(v)) {
        return std::nullopt;
      }
    }
    if (ir::IsFusedReduction(op)) {
      s.reductions.push_back(n.get());
      s.rank = std::max(s.rank, n->inputs()[0]->type().shape.size());
      if (!n->attrs().GetBool(AttrKey::kKeepdim) &&
          !n->output()->type().shape.empty()) {
        s.foreign.insert(n->output());
      }
    } else if (view || any_foreign) {
      s.foreign.insert(n->output());
    } else {
      s.rank = std::max(s.rank, n->output()->type().shape.size());
    }
  }
  for (const Value* p : s.f_params) {
    if (s.foreign_params.contains(p)) return std::nullopt;
    s.rank = std::max(s.rank, p->type().shape.size());
  }
  return s;
}

}  // namespace

std::unique_ptr<ir::Graph> CoalesceDims(const ir::Graph& body) {
  std::optional<Spaces> spaces = Classify(body);
  if (!spaces || spaces->rank < 2) return nullptr;
  const Spaces& sp = *spaces;
  const size_t rank = sp.rank;
  std::vector<const Value*> values(sp.f_params.begin(), sp.f_params.end());
  for (const auto& n : body.nodes()) {
    const Value* v = n->output();
    if (!sp.foreign.contains(v) && !v->type().shape.empty()) {
      values.push_back(v);
    }
  }
  for (const Node* n : sp.reductions) {
    if (n->inputs()[0]->type().shape.size() != rank) return nullptr;
  }
  // F: the broadcast of the F-space values.
  Shape f(rank, 1);
  for (const Value* v : values) {
    const Shape s = Aligned(v->type().shape, rank);
    for (size_t d = 0; d < rank; ++d) f[d] = std::max(f[d], s[d]);
  }
  std::vector<std::vector<bool>> reduced;
  for (const Node* n : sp.reductions) {
    std::optional<std::vector<bool>> r = ReducedDims(*n, rank);
    if (!r) return nullptr;
    reduced.push_back(*r);
  }
  // Groups of F dims: size-1 dims belong to none; a dim joins the group
  // before it when every value and reduction treats the two alike.
  std::vector<std::vector<size_t>> groups;
  for (size_t d = 0; d < rank; ++d) {
    if (f[d] == 1) continue;
    bool join = !groups.empty();
    if (join) {
      const size_t prev = groups.back().back();
      for (const Value* v : values) {
        const Shape s = Aligned(v->type().shape, rank);
        if ((s[prev] == f[prev]) != (s[d] == f[d])) join = false;
      }
      for (const std::vector<bool>& r : reduced) {
        if (r[prev] != r[d]) join = false;
      }
    }
    if (join) {
      groups.back().push_back(d);
    } else {
      groups.push_back({d});
    }
  }
  if (groups.empty() || groups.size() == rank) return nullptr;

  // An F-space value's shape over the groups (each group 1 or full).
  auto grouped = [&](const Shape& shape) {
    if (shape.empty()) return Shape{};
    const Shape s = Aligned(shape, rank);
    Shape out;
    for (const std::vector<size_t>& g : groups) {
      int64_t e = 1;
      for (size_t d : g) e *= s[d];
      out.push_back(e);
    }
    return out;
  };
  auto out = std::make_unique<ir::Graph>(body.name());
  absl::flat_hash_map<const Value*, Value*> map;
  for (const Value* p : body.params()) {
    ir::TensorType t = p->type();
    if (!sp.foreign_params.contains(p)) t.shape = grouped(t.shape);
    map[p] = out->AddParam(p->name(), t, body.param_kind(p));
  }
  size_t next_reduction = 0;
  for (const auto& n : body.nodes()) {
    std::vector<Value*> inputs;
    for (const Value* v : n->inputs()) inputs.push_back(map.at(v));
    ir::TensorType t = n->output()->type();
    const bool foreign = sp.foreign.contains(n->output());
    if (ir::IsFusedReduction(n->op())) {
      const std::vector<bool>& r = reduced[next_reduction++];
      std::vector<int64_t> dims;
      Shape kept;
      for (size_t g = 0; g < groups.size(); ++g) {
        int64_t e = 1;
        for (size_t d : groups[g]) e *= f[d];
        if (r[groups[g].front()]) {
          dims.push_back(static_cast<int64_t>(g));
        } else {
          kept.push_back(e);
        }
      }
      // Reducing size-1 dims only reduces nothing, and an empty list would
      // mean "all": such bodies stay as they are.
      if (dims.empty()) return nullptr;
      // A result without its reduced dims keeps its shape for its readers.
      if (foreign && kept != t.shape) return nullptr;
      if (!foreign) t.shape = grouped(t.shape);
      ir::Attrs attrs = n->attrs();
      attrs.Set(AttrKey::kDims, dims);
      map[n->output()] =
          out->AddOp(n->op(), std::move(inputs), attrs, t)->output();
      continue;
    }
    if (ir::IsOrderedView(n->op())) {
      // Every ordered view is a reshape to its own result's shape.
      ir::Attrs attrs;
      attrs.Set(AttrKey::kShape,
                std::vector<int64_t>(t.shape.begin(), t.shape.end()));
      map[n->output()] =
          out->AddOp(OpId::kReshape, std::move(inputs), attrs, t)->output();
      continue;
    }
    if (!foreign) t.shape = grouped(t.shape);
    map[n->output()] =
        out->AddOp(n->op(), std::move(inputs), n->attrs(), t)->output();
  }
  std::vector<Value*> returns;
  for (const Value* r : body.returns()) returns.push_back(map.at(r));
  out->SetReturns(std::move(returns));
  return out;
}

}  // namespace stepjit::codegen
