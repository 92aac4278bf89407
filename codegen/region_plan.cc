// Fusion-region analysis: assigns each value of a body to the scalar, full,
// reduced (or total) phase, and checks that the body is one the generators
// lower.
#include "codegen/region_plan.h"

#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/ir_names.h"
#include "codegen/region_expand.h"
#include "codegen/region_rows.h"
#include "ir/region_ops.h"
#include "ir/status.h"

namespace stepjit::codegen {

namespace {

bool DTypeSupported(DType t, const AnalyzeOptions& options) {
  return IsFloat(t) || t == DType::kBool || (options.allow_integers && ir::IsIntegral(t));
}

absl::StatusOr<Plan> AnalyzeClassic(const ir::Graph& body,
                                    const AnalyzeOptions& options) {
  Plan plan;
  for (const Value* p : body.params()) {
    if (!DTypeSupported(p->type().dtype, options)) {
      return Unsupported(
          absl::StrCat("dtype ", ir::DTypeName(p->type().dtype)));
    }
  }
  const Node* first_reduction = nullptr;
  std::vector<int64_t> dims;
  for (const auto& n : body.nodes()) {
    if (n->kind() != ir::NodeKind::kOp) return Unsupported("nested region");
    const OpId op = n->op();
    const ir::OpKind kind = ir::GetOpInfo(op).kind;
    if (!(kind == ir::OpKind::kElementwise ||
          kind == ir::OpKind::kInplaceUpdate || op == OpId::kFull ||
          op == OpId::kCast || op == OpId::kWhere ||
          IsOrderPreservingView(op) || IsReduction(op))) {
      return Unsupported(absl::StrCat("op ", ir::OpName(op)));
    }
    if (!DTypeSupported(n->output()->type().dtype, options)) {
      return Unsupported(
          absl::StrCat("dtype ", ir::DTypeName(n->output()->type().dtype)));
    }
    if (!IsReduction(op)) continue;
    const ir::TensorType& in = n->inputs()[0]->type();
    if (!IsFloat(in.dtype) || !IsFloat(n->output()->type().dtype)) {
      return Unsupported("a reduction of non-float values");
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> d,
                     ir::NormalizeDims(n->attrs().GetInts(AttrKey::kDims),
                                       static_cast<int64_t>(in.shape.size())));
    if (first_reduction == nullptr) {
      first_reduction = n.get();
      plan.f_shape = in.shape;
      dims = d;
    } else if (in.shape != plan.f_shape || d != dims) {
      return Unsupported("reductions over different shapes or dims");
    }
  }
  if (first_reduction != nullptr) {
    plan.f_reduced.assign(plan.f_shape.size(), false);
    plan.r_numel = 1;
    for (int64_t d : dims) plan.f_reduced[d] = true;
    for (size_t d = 0; d < plan.f_shape.size(); ++d) {
      if (!plan.f_reduced[d]) plan.r_numel *= plan.f_shape[d];
    }
    plan.row_loop = true;
  } else {
    for (const auto& n : body.nodes()) {
      if (Numel(n->output()) > ir::NumElements(plan.f_shape))
        plan.f_shape = n->output()->type().shape;
    }
    plan.f_reduced.assign(plan.f_shape.size(), false);
  }
  plan.f_numel = ir::NumElements(plan.f_shape);
  if (plan.f_numel == 0)
    return Unsupported("an empty region has nothing to compute");
  if (plan.f_numel == 1 && !options.allow_one_element) {
    return Unsupported("a one-element region is not worth a kernel");
  }

  auto param_domain = [&](const Value* p) -> std::optional<Domain> {
    const int64_t n = Numel(p);
    if (n == 1) return Domain::kScalar;
    if (n == plan.f_numel) return Domain::kFull;
    if (plan.r_numel > 0 && n == plan.r_numel) return Domain::kReduced;
    return std::nullopt;  // a broadcast operand of a full-size op
  };
  for (const Value* p : body.params()) {
    if (auto d = param_domain(p)) plan.domain[p] = *d;
  }
  for (const auto& n : body.nodes()) {
    const Value* out = n->output();
    const int64_t numel = Numel(out);
    bool any_full = false, any_reduced = false, all_scalar = true;
    for (const Value* v : n->inputs()) {
      auto it = plan.domain.find(v);
      const std::optional<Domain> d = it != plan.domain.end()
                                          ? std::optional<Domain>(it->second)
                                          : std::nullopt;
      any_full |= !d || *d == Domain::kFull;
      any_reduced |= d && *d == Domain::kReduced && body.IsParam(v) == false;
      all_scalar &= d && *d == Domain::kScalar;
    }
    Domain d;
    if (IsReduction(n->op())) {
      const Value* in = n->inputs()[0];
      auto it = plan.domain.find(in);
      if (it == plan.domain.end() || it->second != Domain::kFull ||
          in->type().shape != plan.f_shape) {
        return Unsupported(
            "a reduction whose input is not the region's full shape");
      }
      d = Domain::kReduced;
    } else if (any_reduced) {
      if (numel != plan.r_numel)
        return Unsupported("a reduced value broadcast back over the region");
      d = Domain::kReduced;
    } else if (all_scalar && numel == 1) {
      d = Domain::kScalar;
    } else if (numel == plan.f_numel) {
      d = Domain::kFull;
    } else if (plan.r_numel > 0 && numel == plan.r_numel) {
      d = Domain::kReduced;
    } else {
      return Unsupported(absl::StrCat(
          "a value of ", numel, " elements in a region over ", plan.f_numel));
    }
    // Operands: full-size ops may broadcast params against F; reduced-domain
    // ops read reduced-size or 0-d values only.
    for (const Value* v : n->inputs()) {
      auto it = plan.domain.find(v);
      if (d == Domain::kScalar) continue;
      if (d == Domain::kReduced) {
        if (IsReduction(n->op())) continue;
        if (it == plan.domain.end() || it->second == Domain::kFull) {
          return Unsupported("a reduced-domain op reads a full-size value");
        }
        continue;
      }
      // A reduced-size param read by a full-size op is a broadcast operand.
      if (it != plan.domain.end() && it->second != Domain::kReduced) continue;
      if (out->type().shape != plan.f_shape ||
          !ir::BroadcastShapes(v->type().shape, plan.f_shape).ok() ||
          *ir::BroadcastShapes(v->type().shape, plan.f_shape) != plan.f_shape) {
        return Unsupported(
            "an operand that does not broadcast to the region's shape");
      }
      plan.row_loop = true;
    }
    plan.domain[out] = d;
  }
  for (const Value* r : body.returns()) {
    if (!plan.domain.contains(r))
      return Unsupported("a broadcast parameter is returned");
  }
  return plan;
}

bool HoldsRowOps(const ir::Graph& body) {
  for (const auto& n : body.nodes()) {
    if (n->kind() == ir::NodeKind::kOp && IsRowOp(n->op())) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<Plan> Analyze(const ir::Graph& body,
                             const AnalyzeOptions& options) {
  for (const auto& n : body.nodes()) {
    if (n->kind() == ir::NodeKind::kOp && n->op() != OpId::kFull &&
        ir::RegionRoleOf(*n) == ir::RegionRole::kNone)
      return Unsupported(absl::StrCat("op ", ir::OpName(n->op())));
  }
  if (!options.allow_row_phases || !HoldsRowOps(body)) {
    absl::StatusOr<Plan> classic = AnalyzeClassic(body, options);
    if (classic.ok() || !options.allow_row_phases) return classic;
    absl::StatusOr<Plan> rows = AnalyzeRows(body, options);
    return rows.ok() ? rows : classic;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> expanded, ExpandRowOps(body));
  absl::StatusOr<Plan> plan = AnalyzeClassic(*expanded, options);
  if (!plan.ok()) plan = AnalyzeRows(*expanded, options);
  if (plan.ok()) plan->expanded = std::move(expanded);
  return plan;
}

std::vector<int64_t> BroadcastStrides(const ir::Shape& shape,
                                      const ir::Shape& f) {
  std::vector<int64_t> s(f.size(), 0);
  int64_t stride = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    const size_t d = f.size() - 1 - k, sd = shape.size() - 1 - k;
    if (shape[sd] != 1) s[d] = stride;
    stride *= shape[sd];
  }
  return s;
}

std::string EraseSizes(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_sizes = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '[') {
      in_sizes = (i > 0 && absl::ascii_isalnum(text[i - 1])) ||
                 absl::EndsWith(text.substr(0, i), "shape = ");
    } else if (c == ']') {
      in_sizes = false;
    } else if (in_sizes && absl::ascii_isdigit(c) &&
               !absl::ascii_isdigit(text[i - 1])) {
      size_t j = i;
      while (j < text.size() && absl::ascii_isdigit(text[j])) ++j;
      const absl::string_view number = text.substr(i, j - i);
      if (number != "0" && number != "1") {
        out += '?';
        i = j - 1;
        continue;
      }
    }
    out += c;
  }
  return out;
}

}  // namespace stepjit::codegen
