// ExpandRowOps: softmax, layer_norm, var and the losses as primitive steps.
#include "codegen/region_expand.h"

#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "codegen/ir_names.h"
#include "ir/infer.h"
#include "ir/op_attrs.h"
#include "ir/region_ops.h"
#include "ir/status.h"

namespace stepjit::codegen {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Appends primitive nodes to a graph, inferring result shapes.
class Builder {
 public:
  explicit Builder(ir::Graph& g) : g_(g) {}

  Value* Op(OpId op, std::vector<Value*> in, ir::Attrs attrs, DType t,
            ir::Shape s) {
    return g_
        .AddOp(op, std::move(in), std::move(attrs),
               ir::TensorType{t, std::move(s)})
        ->output();
  }
  Value* Const(double v, DType t) {
    return Op(OpId::kFull, {},
              {{AttrKey::kShape, std::vector<int64_t>{}},
               {AttrKey::kValue, v},
               {AttrKey::kDTypeAttr, t}},
              t, {});
  }
  // A count of elements (a row length, a number of rows): a constant marked
  // with role "size", which a shape-generic kernel reads from its run-time
  // sizes instead of compiling in.
  Value* Size(int64_t count, DType t) {
    return Op(OpId::kFull, {},
              {{AttrKey::kShape, std::vector<int64_t>{}},
               {AttrKey::kValue, static_cast<double>(count)},
               {AttrKey::kDTypeAttr, t},
               {AttrKey::kRole, std::string(kSizeRole)}},
              t, {});
  }
  Value* Unary(OpId op, Value* x, DType t) {
    return Op(op, {x}, {}, t, x->type().shape);
  }
  Value* Binary(OpId op, Value* a, Value* b, DType t) {
    return Op(op, {a, b}, {}, t,
              *ir::BroadcastShapes(a->type().shape, b->type().shape));
  }
  Value* Where(Value* c, Value* a, Value* b, DType t) {
    ir::Shape s = *ir::BroadcastShapes(a->type().shape, b->type().shape);
    return Op(OpId::kWhere, {c, a, b}, {}, t,
              *ir::BroadcastShapes(c->type().shape, s));
  }
  Value* Cast(Value* x, DType t) {
    if (x->type().dtype == t) return x;
    return Op(OpId::kCast, {x}, {{AttrKey::kDTypeAttr, t}}, t, x->type().shape);
  }
  Value* Reshape(Value* x, ir::Shape s) {
    return Op(OpId::kReshape, {x},
              {{AttrKey::kShape, std::vector<int64_t>(s.begin(), s.end())}},
              x->type().dtype, s);
  }
  // A reduction over `dims` (sorted) of x, accumulating in f64 and
  // rounding to `t`.
  Value* Reduce(OpId op, Value* x, const std::vector<int64_t>& dims,
                bool keepdim, DType t) {
    ir::Shape s;
    const ir::Shape& in = x->type().shape;
    for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
      const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
      if (!reduced)
        s.push_back(in[d]);
      else if (keepdim)
        s.push_back(1);
    }
    return Op(op, {x}, {{AttrKey::kDims, dims}, {AttrKey::kKeepdim, keepdim}},
              t, s);
  }

 private:
  ir::Graph& g_;
};

int64_t Rank(const Value* v) {
  return static_cast<int64_t>(v->type().shape.size());
}
std::vector<int64_t> Trailing(int64_t rank, int64_t k) {
  std::vector<int64_t> d(static_cast<size_t>(k));
  std::iota(d.begin(), d.end(), rank - k);
  return d;
}
int64_t Count(const Value* x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x->type().shape[d];
  return n;
}
// The eager kernels' arithmetic type for storage type t.
DType AccOf(DType t) { return t == DType::kF64 ? DType::kF64 : DType::kF32; }

// SoftmaxKernel: max in Acc (an all -inf row uses 0), exp in Acc, the sum in
// f64; softmax multiplies by the f64 reciprocal rounded to Acc.
Value* Softmax(Builder& b, const Node& n, Value* x, bool log) {
  const DType t = n.output()->type().dtype, a = AccOf(t);
  const std::vector<int64_t> row = Trailing(Rank(x), 1);
  Value* m = b.Reduce(OpId::kAmax, x, row, true, a);
  Value* ninf = b.Binary(OpId::kEq, m,
                         b.Const(-std::numeric_limits<double>::infinity(), a),
                         DType::kBool);
  m = b.Where(ninf, b.Const(0, a), m, a);
  Value* e = b.Unary(OpId::kExp, b.Binary(OpId::kSub, x, m, a), a);
  Value* s = b.Reduce(OpId::kSum, e, row, true, DType::kF64);
  Value* y;
  if (log) {
    Value* lse = b.Binary(OpId::kAdd, m,
                          b.Cast(b.Unary(OpId::kLog, s, DType::kF64), a), a);
    y = b.Binary(OpId::kSub, x, lse, a);
  } else {
    Value* inv = b.Cast(b.Unary(OpId::kReciprocal, s, DType::kF64), a);
    y = b.Binary(OpId::kMul, e, inv, a);
  }
  return b.Cast(y, t);
}

// Mean, then the sum of squared deviations from it, in f64 (two passes, as
// the eager layer_norm and var kernels).
std::pair<Value*, Value*> Deviations(Builder& b, Value* x,
                                     const std::vector<int64_t>& dims,
                                     bool keepdim) {
  constexpr DType d64 = DType::kF64;
  Value* mean = b.Reduce(OpId::kMean, x, dims, true, d64);
  Value* d = b.Binary(OpId::kSub, x, mean, d64);
  Value* ss =
      b.Reduce(OpId::kSum, b.Binary(OpId::kMul, d, d, d64), dims, keepdim, d64);
  return {d, ss};
}

// LayerNormKernel: y = (x - mean) / sqrt(ss / n + eps) * w + b in f64.
Value* LayerNorm(Builder& b, const Node& n, const std::vector<Value*>& in) {
  constexpr DType d64 = DType::kF64;
  Value* x = in[0];
  const std::vector<int64_t> dims = Trailing(
      Rank(x), ir::AttrInt(n.op(), n.attrs(), ir::AttrKey::kNormalizedNdim));
  auto [d, ss] = Deviations(b, x, dims, true);
  Value* var = b.Binary(OpId::kDiv, ss, b.Size(Count(x, dims), d64), d64);
  var = b.Binary(
      OpId::kAdd, var,
      b.Const(ir::AttrFloat(n.op(), n.attrs(), ir::AttrKey::kEps), d64), d64);
  Value* rstd = b.Unary(OpId::kReciprocal, b.Unary(OpId::kSqrt, var, d64), d64);
  Value* y = b.Binary(OpId::kMul, d, rstd, d64);
  if (in.size() > 1) y = b.Binary(OpId::kMul, y, in[1], d64);
  if (in.size() > 2) y = b.Binary(OpId::kAdd, y, in[2], d64);
  return b.Cast(y, n.output()->type().dtype);
}

// ReduceKernel<kVar>: ss / (count - correction), NaN when that is <= 0.
absl::StatusOr<Value*> Var(Builder& b, const Node& n, Value* x) {
  ASSIGN_OR_RETURN(
      std::vector<int64_t> dims,
      ir::NormalizeDims(n.attrs().GetInts(AttrKey::kDims), Rank(x)));
  auto [d, ss] = Deviations(b, x, dims, n.attrs().GetBool(AttrKey::kKeepdim));
  const int64_t denom =
      Count(x, dims) - ir::AttrInt(n.op(), n.attrs(), ir::AttrKey::kCorrection);
  Value* v = b.Binary(
      OpId::kDiv, ss,
      denom > 0 ? b.Size(denom, DType::kF64) : b.Const(kNaN, DType::kF64),
      DType::kF64);
  return b.Cast(v, n.output()->type().dtype);
}

// Sums the losses `l` (f64) over all their dims as the loss's reduction
// says (`count` of them).
Value* ReduceLoss(Builder& b, const Node& n, Value* l, int64_t count) {
  const std::string red =
      ir::AttrString(n.op(), n.attrs(), ir::AttrKey::kReduction);
  if (red != "none") {
    l = b.Reduce(OpId::kSum, l, Trailing(Rank(l), Rank(l)), false, DType::kF64);
    if (red == "mean") {
      l = b.Binary(OpId::kDiv, l, b.Size(count, DType::kF64), DType::kF64);
    }
  }
  return b.Cast(l, n.output()->type().dtype);
}

// CrossEntropyKernel in f64: lse = max + log(sum(exp(x - max))), the target
// column picked by comparing the column index with the target, and the
// label-smoothed loss (1 - ls) * (lse - x[t]) + ls * (lse - sum(x) / C),
// kept whole for ls = 0 as the eager kernel computes it (so a -inf logit
// gives NaN there too).
Value* CrossEntropy(Builder& b, const Node& n, Value* x, Value* target) {
  constexpr DType d64 = DType::kF64;
  const int64_t rows = x->type().shape[0], c = x->type().shape[1];
  const double ls =
      ir::AttrFloat(n.op(), n.attrs(), ir::AttrKey::kLabelSmoothing);
  const std::vector<int64_t> row = {1};
  Value* m = b.Reduce(OpId::kAmax, x, row, true, d64);
  Value* e = b.Unary(OpId::kExp, b.Binary(OpId::kSub, x, m, d64), d64);
  Value* lse = b.Binary(
      OpId::kAdd, m,
      b.Unary(OpId::kLog, b.Reduce(OpId::kSum, e, row, true, d64), d64), d64);
  Value* col = b.Op(OpId::kArange, {},
                    {{AttrKey::kShape, std::vector<int64_t>{c}},
                     {AttrKey::kStart, 0.0},
                     {AttrKey::kStep, 1.0},
                     {AttrKey::kDTypeAttr, d64}},
                    d64, {c});
  Value* t = b.Cast(b.Reshape(target, {rows, 1}), d64);
  Value* hit = b.Binary(OpId::kEq, col, t, DType::kBool);
  Value* picked = b.Reduce(OpId::kSum, b.Where(hit, x, b.Const(0, d64), d64),
                           row, true, d64);
  Value* sum_x = b.Reduce(OpId::kSum, x, row, true, d64);
  Value* smooth = b.Binary(
      OpId::kSub, lse, b.Binary(OpId::kDiv, sum_x, b.Size(c, d64), d64), d64);
  Value* loss =
      b.Binary(OpId::kAdd,
               b.Binary(OpId::kMul, b.Binary(OpId::kSub, lse, picked, d64),
                        b.Const(1.0 - ls, d64), d64),
               b.Binary(OpId::kMul, b.Const(ls, d64), smooth, d64), d64);
  Value* nan = b.Const(kNaN, d64);
  Value* in_range = b.Where(
      b.Binary(OpId::kLt, t, b.Size(c, d64), DType::kBool), loss, nan, d64);
  loss = b.Where(b.Binary(OpId::kGe, t, b.Const(0, d64), DType::kBool),
                 in_range, nan, d64);
  return ReduceLoss(b, n, b.Reshape(loss, {rows}), rows);
}

// MseLossKernel: (a - b)^2 in Acc for "none", in f64 when summed.
Value* MseLoss(Builder& b, const Node& n, Value* x, Value* y) {
  const DType t = n.output()->type().dtype;
  const bool none =
      ir::AttrString(n.op(), n.attrs(), ir::AttrKey::kReduction) == "none";
  const DType a = none ? AccOf(t) : DType::kF64;
  Value* d = b.Binary(OpId::kSub, x, y, a);
  Value* sq = b.Binary(OpId::kMul, d, d, a);
  if (none) return b.Cast(sq, t);
  return ReduceLoss(b, n, sq, ir::NumElements(sq->type().shape));
}

absl::StatusOr<Value*> Expand(Builder& b, const Node& n,
                              const std::vector<Value*>& in) {
  if (ir::RegionRoleOf(n) == ir::RegionRole::kNone) {
    return absl::UnimplementedError(
        absl::StrCat("op ", ir::OpName(n.op()), " in this form"));
  }
  switch (n.op()) {
    case OpId::kSoftmax:
      return Softmax(b, n, in[0], false);
    case OpId::kLogSoftmax:
      return Softmax(b, n, in[0], true);
    case OpId::kLayerNorm:
      return LayerNorm(b, n, in);
    case OpId::kVar:
      return Var(b, n, in[0]);
    case OpId::kCrossEntropy:
      return CrossEntropy(b, n, in[0], in[1]);
    case OpId::kMseLoss:
      return MseLoss(b, n, in[0], in[1]);
    default:
      return absl::InternalError("not a row op");
  }
}

}  // namespace

bool IsRowOp(OpId op) { return ir::IsRowReduction(op); }

absl::StatusOr<std::unique_ptr<ir::Graph>> ExpandRowOps(const ir::Graph& body) {
  auto g = std::make_unique<ir::Graph>(body.name());
  Builder b(*g);
  absl::flat_hash_map<const Value*, Value*> map;
  for (const Value* p : body.params())
    map[p] = g->AddParam(p->name(), p->type(), body.param_kind(p));
  for (const auto& n : body.nodes()) {
    if (n->kind() != ir::NodeKind::kOp)
      return absl::UnimplementedError("nested region");
    std::vector<Value*> in;
    for (const Value* v : n->inputs()) in.push_back(map.at(v));
    if (IsRowOp(n->op())) {
      ASSIGN_OR_RETURN(map[n->output()], Expand(b, *n, in));
    } else {
      map[n->output()] =
          g->AddOp(n->op(), std::move(in), n->attrs(), n->output()->type())
              ->output();
    }
  }
  std::vector<Value*> returns;
  for (const Value* r : body.returns()) returns.push_back(map.at(r));
  g->SetReturns(std::move(returns));
  return g;
}

}  // namespace stepjit::codegen
