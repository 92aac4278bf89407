// RegionRoleOf: the op kinds, table flags and attribute forms a fusion
// region holds.
#include "ir/region_ops.h"

#include <vector>

#include "ir/infer.h"
#include "ir/op_attrs.h"
#include "ir/shape.h"

namespace stepjit::ir {

namespace {

int64_t Rank(const Value* v) {
  return static_cast<int64_t>(v->type().shape.size());
}

bool LastDim(const Node& n) {
  const int64_t rank = Rank(n.inputs()[0]);
  return rank > 0 && WrapDim(n.attrs().GetInt(AttrKey::kDim), rank) == rank - 1;
}

// dims (empty = all) are {rank-k, ..., rank-1} for some k.
bool TrailingDims(const Node& n) {
  const int64_t rank = Rank(n.inputs()[0]);
  absl::StatusOr<std::vector<int64_t>> dims =
      NormalizeDims(n.attrs().GetInts(AttrKey::kDims), rank);
  if (!dims.ok()) return false;
  for (size_t k = 0; k < dims->size(); ++k) {
    if ((*dims)[k] != rank - static_cast<int64_t>(dims->size() - k))
      return false;
  }
  return true;
}

}  // namespace

RegionRole RegionRoleOf(const Node& n) {
  if (n.kind() != NodeKind::kOp) return RegionRole::kNone;
  const OpId op = n.op();
  const OpKind kind = GetOpInfo(op).kind;
  if (kind == OpKind::kElementwise || kind == OpKind::kInplaceUpdate)
    return RegionRole::kElementwise;
  if (IsOrderedView(op)) return RegionRole::kElementwise;
  if (IsFusedReduction(op)) return RegionRole::kReduce;
  if (!IsRowReduction(op)) return RegionRole::kNone;
  // Row ops reduce a row only when their dims are the trailing ones.
  if (n.attrs().Has(AttrKey::kDim) && !LastDim(n)) return RegionRole::kNone;
  if (n.attrs().Has(AttrKey::kDims) && !TrailingDims(n))
    return RegionRole::kNone;
  return RegionRole::kReduce;
}

std::optional<RowExtent> RowExtentOf(const Node& n) {
  if (RegionRoleOf(n) != RegionRole::kReduce) return std::nullopt;
  const Shape& in = n.inputs()[0]->type().shape;
  const int64_t rank = static_cast<int64_t>(in.size());
  if (rank == 0) return std::nullopt;
  // The number of trailing dims each op reduces.
  int64_t k = 0;
  switch (n.op()) {
    case OpId::kSoftmax:
    case OpId::kLogSoftmax:
    case OpId::kCrossEntropy:
      k = 1;
      break;
    case OpId::kLayerNorm:
      k = AttrInt(n.op(), n.attrs(), AttrKey::kNormalizedNdim);
      break;
    case OpId::kMseLoss:
      return std::nullopt;
    default: {  // sum, mean, amax, var: their dims (empty = all), trailing
      absl::StatusOr<std::vector<int64_t>> dims =
          NormalizeDims(n.attrs().GetInts(AttrKey::kDims), rank);
      if (!dims.ok() || !TrailingDims(n)) return std::nullopt;
      k = dims->empty() ? rank : static_cast<int64_t>(dims->size());
    }
  }
  if (k < 1 || k > rank) return std::nullopt;
  RowExtent e{.rows = 1, .row_len = 1};
  for (int64_t d = 0; d < rank; ++d)
    (d < rank - k ? e.rows : e.row_len) *= in[d];
  return e;
}

bool IsScalarConstant(const Node* n) {
  return n != nullptr && n->kind() == NodeKind::kOp && n->op() == OpId::kFull &&
         n->output()->type().shape.empty();
}

}  // namespace stepjit::ir
