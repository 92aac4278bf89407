// AnalyzeRows: the row dims, each value's domain and level, and the checks
// that keep every value one the row loops can compute.
#include "codegen/region_rows.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/ir_names.h"
#include "ir/infer.h"
#include "ir/op_attrs.h"
#include "ir/status.h"

namespace stepjit::codegen {

namespace {

// The reduction with the largest input fixes F and the row dims.
absl::Status FindRows(const ir::Graph& body, const AnalyzeOptions& options,
                      Plan& plan) {
  const Node* widest = nullptr;
  for (const auto& n : body.nodes()) {
    if (IsReduction(n->op()) &&
        (widest == nullptr ||
         Numel(n->inputs()[0]) > Numel(widest->inputs()[0])))
      widest = n.get();
  }
  if (widest == nullptr) return Unsupported("no reduction to make rows of");
  plan.f_shape = widest->inputs()[0]->type().shape;
  const int64_t rank = static_cast<int64_t>(plan.f_shape.size());
  ASSIGN_OR_RETURN(
      std::vector<int64_t> dims,
      ir::NormalizeDims(widest->attrs().GetInts(AttrKey::kDims), rank));
  if (rank == 0) return Unsupported("a reduction of a 0-d value");
  plan.f_reduced.assign(plan.f_shape.size(), false);
  plan.row_len = 1;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] != rank - static_cast<int64_t>(dims.size() - k))
      return Unsupported("a row reduction over non-trailing dims");
    plan.f_reduced[dims[k]] = true;
    plan.row_len *= plan.f_shape[dims[k]];
  }
  plan.f_numel = ir::NumElements(plan.f_shape);
  if (plan.f_numel == 0)
    return Unsupported("an empty region has nothing to compute");
  if (plan.f_numel == 1 && !options.allow_one_element)
    return Unsupported("a one-element region is not worth a kernel");
  plan.rows = plan.f_numel / plan.row_len;
  plan.r_numel = plan.rows;
  plan.row_loop = true;
  return absl::OkStatus();
}

// Whether `shape`, aligned with F from the right, holds one value per row:
// F's extents in the leading dims and 1 in the row dims.
bool OnePerRow(const ir::Shape& shape, const Plan& plan) {
  const size_t rank = plan.f_shape.size();
  if (shape.size() > rank) return false;
  for (size_t d = 0; d < rank; ++d) {
    const size_t k = d + shape.size();
    const int64_t e = k >= rank ? shape[k - rank] : 1;
    if (e != (plan.f_reduced[d] ? 1 : plan.f_shape[d])) return false;
  }
  return true;
}

// A param that full ops read broadcast: it must broadcast to F and, within
// the row dims, be either constant (stride 0) or all of the row (stride 1).
absl::Status BroadcastParam(const Value* p, Plan& plan) {
  const ir::Shape& s = p->type().shape;
  absl::StatusOr<ir::Shape> b = ir::BroadcastShapes(s, plan.f_shape);
  if (!b.ok() || *b != plan.f_shape)
    return Unsupported(
        "an operand that does not broadcast to the region's shape");
  const size_t rank = plan.f_shape.size();
  bool all_one = true, all_full = true;
  for (size_t d = 0; d < rank; ++d) {
    if (!plan.f_reduced[d]) continue;
    const int64_t e = d + s.size() >= rank ? s[d + s.size() - rank] : 1;
    all_one &= e == 1;
    all_full &= e == plan.f_shape[d];
  }
  if (!all_one && !all_full)
    return Unsupported("an operand that broadcasts over part of a row");
  plan.row_stride[p] = all_one ? 0 : 1;
  return absl::OkStatus();
}

absl::Status ParamDomains(const ir::Graph& body, Plan& plan) {
  for (const Value* p : body.params()) {
    const ir::TensorType& t = p->type();
    const int64_t n = Numel(p);
    if (ir::IsIntegral(t.dtype)) {
      // Integer params are per-row values (a cross_entropy target).
      if (n != plan.rows)
        return Unsupported("an integer operand that is not one per row");
      plan.domain[p] = Domain::kReduced;
    } else if (!IsFloat(t.dtype) && t.dtype != ir::DType::kBool) {
      return Unsupported(absl::StrCat("dtype ", ir::DTypeName(t.dtype)));
    } else if (n == 1) {
      plan.domain[p] = Domain::kScalar;
    } else if (n == plan.f_numel) {
      plan.domain[p] = Domain::kFull;
    } else if (OnePerRow(t.shape, plan)) {
      plan.domain[p] = Domain::kReduced;
    } else {
      RETURN_IF_ERROR(BroadcastParam(p, plan));
    }
    plan.level[p] = 0;
  }
  return absl::OkStatus();
}

// What a node's operands are: which domains occur and the highest level.
struct Operands {
  bool full = false, reduced = false, total = false;
  int level = 0;
};
Operands Classify(const Node& n, const Plan& plan) {
  Operands o;
  for (const Value* v : n.inputs()) {
    auto it = plan.domain.find(v);
    if (it == plan.domain.end()) {  // a broadcast param
      o.full = true;
      continue;
    }
    o.full |= it->second == Domain::kFull;
    o.reduced |= it->second == Domain::kReduced;
    o.total |= it->second == Domain::kTotal;
    if (auto l = plan.level.find(v); l != plan.level.end())
      o.level = std::max(o.level, l->second);
  }
  return o;
}

// A reduction of full values over the row dims (a phase's work), or of row
// values over every row (a total).
absl::Status ReductionDomain(const Node& n, const Plan& plan, Domain& d,
                             int& level) {
  const Value* in = n.inputs()[0];
  if (!IsFloat(in->type().dtype) || !IsFloat(n.output()->type().dtype))
    return Unsupported("a reduction of non-float values");
  auto it = plan.domain.find(in);
  const Domain from = it == plan.domain.end() ? Domain::kFull : it->second;
  const int64_t rank = static_cast<int64_t>(in->type().shape.size());
  ASSIGN_OR_RETURN(std::vector<int64_t> dims,
                   ir::NormalizeDims(n.attrs().GetInts(AttrKey::kDims), rank));
  if (from == Domain::kFull && it != plan.domain.end() &&
      in->type().shape == plan.f_shape) {
    for (int64_t k = 0; k < rank; ++k) {
      if (plan.f_reduced[k] != std::binary_search(dims.begin(), dims.end(), k))
        return Unsupported("reductions over different shapes or dims");
    }
    d = Domain::kReduced;
    level = plan.level.at(in) + 1;
    return absl::OkStatus();
  }
  if ((from == Domain::kReduced || from == Domain::kTotal) &&
      Numel(n.output()) == 1) {
    d = Domain::kTotal;
    return absl::OkStatus();
  }
  return Unsupported("a reduction whose input is not the region's full shape");
}

// The column index along a one-dim row (cross_entropy's pick).
absl::Status ArangeDomain(const Node& n, const Plan& plan) {
  const ir::Shape& s = n.output()->type().shape;
  const size_t rank = plan.f_shape.size();
  const bool last_only =
      plan.f_reduced.back() &&
      std::count(plan.f_reduced.begin(), plan.f_reduced.end(), true) == 1;
  if (!last_only || s.size() != 1 || s[0] != plan.f_shape[rank - 1] ||
      n.attrs().GetDouble(AttrKey::kStart) != 0 ||
      ir::GetAttr<OpId::kArange, AttrKey::kStep>(n.attrs()) != 1)
    return Unsupported("an arange that is not the index along the row");
  return absl::OkStatus();
}

absl::Status NodeDomain(const Node& n, Plan& plan) {
  const Value* out = n.output();
  const int64_t numel = Numel(out);
  const Operands o = Classify(n, plan);
  Domain d = Domain::kScalar;
  int level = o.level;
  const ir::DType dt = out->type().dtype;
  if (!IsFloat(dt) && dt != ir::DType::kBool &&
      !(ir::IsIntegral(dt) && IsOrderPreservingView(n.op()) && o.reduced &&
        !o.full))
    return Unsupported(absl::StrCat("dtype ", ir::DTypeName(dt)));
  if (IsReduction(n.op())) {
    RETURN_IF_ERROR(ReductionDomain(n, plan, d, level));
  } else if (n.op() == OpId::kArange) {
    RETURN_IF_ERROR(ArangeDomain(n, plan));
    d = Domain::kFull;
  } else if (o.total) {
    if (o.full || o.reduced || numel != 1)
      return Unsupported("a value over all rows read per element or row");
    d = Domain::kTotal;
  } else if (o.full) {
    if (numel != plan.f_numel)
      return Unsupported(absl::StrCat(
          "a value of ", numel, " elements in a region over ", plan.f_numel));
    for (const Value* v : n.inputs()) {
      auto it = plan.domain.find(v);
      if (it != plan.domain.end() && it->second == Domain::kReduced &&
          (out->type().shape != plan.f_shape ||
           !OnePerRow(v->type().shape, plan)))
        return Unsupported("a row value that does not broadcast over its row");
    }
    d = Domain::kFull;
  } else if (o.reduced) {
    if (numel != plan.rows)
      return Unsupported(absl::StrCat("a value of ", numel,
                                      " elements in a region of ", plan.rows,
                                      " rows"));
    d = Domain::kReduced;
  } else if (numel == 1) {
    d = Domain::kScalar;
  } else {
    return Unsupported(absl::StrCat("op ", ir::OpName(n.op())));
  }
  if (d == Domain::kFull || d == Domain::kReduced) plan.level[out] = level;
  if (IsReduction(n.op()) && d == Domain::kReduced)
    plan.row_phases = std::max(plan.row_phases, level);
  plan.has_totals |= d == Domain::kTotal;
  plan.domain[out] = d;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Plan> AnalyzeRows(const ir::Graph& body,
                                 const AnalyzeOptions& options) {
  Plan plan;
  RETURN_IF_ERROR(FindRows(body, options, plan));
  RETURN_IF_ERROR(ParamDomains(body, plan));
  for (const auto& n : body.nodes()) {
    if (n->kind() != ir::NodeKind::kOp) return Unsupported("nested region");
    RETURN_IF_ERROR(NodeDomain(*n, plan));
  }
  for (const Value* r : body.returns()) {
    if (!plan.domain.contains(r))
      return Unsupported("a broadcast parameter is returned");
    if (ir::IsIntegral(r->type().dtype))
      return Unsupported("an integer value is returned");
  }
  return plan;
}

RowPassWork RowPass(const ir::Graph& body, const Plan& plan, int phase) {
  RowPassWork work;
  std::vector<const ir::Value*> stack;
  const bool final = phase > plan.row_phases;
  for (const auto& n : body.nodes()) {
    if (!final && IsReduction(n->op()) &&
        plan.domain.at(n->output()) == Domain::kReduced &&
        plan.level.at(n->output()) == phase) {
      work.reductions.push_back(n.get());
      stack.push_back(n->inputs()[0]);
    }
  }
  if (final) {
    for (const ir::Value* r : body.returns()) {
      if (plan.domain.at(r) == Domain::kFull) stack.push_back(r);
    }
  }
  work.read.insert(stack.begin(), stack.end());
  while (!stack.empty()) {
    const ir::Value* v = stack.back();
    stack.pop_back();
    const ir::Node* p = v->producer();
    if (p == nullptr || plan.domain.at(v) != Domain::kFull ||
        !work.nodes.insert(p).second)
      continue;
    for (const ir::Value* in : p->inputs()) {
      work.read.insert(in);
      stack.push_back(in);
    }
  }
  return work;
}

}  // namespace stepjit::codegen
