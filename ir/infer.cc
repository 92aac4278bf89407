// Shape and dtype inference rules: one helper per op kind of ir/ops.def.
#include "ir/infer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/infer_conv.h"
#include "ir/infer_matmul.h"
#include "ir/op_attrs.h"
#include "ir/scalar_def.h"
#include "ir/status.h"

namespace stepjit::ir {
namespace {

std::string Describe(const TensorType& t) {
  return absl::StrCat(DTypeName(t.dtype), ShapeToString(t.shape));
}

int Category(DType t) {
  if (t == DType::kBool) return 0;
  if (IsIntegral(t)) return 1;
  return 2;
}

// The comparisons: the ops ir/scalar_def.h defines with a boolean result.
bool IsCompare(OpId op) {
  switch (op) {
#define SJ_COMPARE_CASE(e, expr) case OpId::k##e:
    SJ_COMPARE_SCALAR_DEFS(SJ_COMPARE_CASE)
#undef SJ_COMPARE_CASE
    return true;
    default:
      return false;
  }
}

DType ToFloat(DType t) { return IsFloating(t) ? t : DType::kF32; }

// Elementwise ops broadcast their operands and promote dtypes as PyTorch does;
// the table's kFloatResult ops (exp, sigmoid, div ...) give a float,
// comparisons a bool.
absl::StatusOr<TensorType> InferElementwise(OpId op,
                                            absl::Span<const TensorType> in,
                                            const Attrs& attrs) {
  if (op == OpId::kCast) {
    return TensorType{attrs.GetDType(AttrKey::kDTypeAttr), in[0].shape};
  }
  Shape shape = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i) {
    auto b = BroadcastShapes(shape, in[i].shape);
    if (!b.ok()) return InvalidInputs(op, in, b.status().message());
    shape = *b;
  }
  if (op == OpId::kWhere) {
    if (in[0].dtype != DType::kBool) {
      return InvalidInputs(op, in, "condition must be bool");
    }
    return TensorType{ResultType(in.subspan(1)), shape};
  }
  DType dt = ResultType(in);
  if (dt == DType::kBool && (op == OpId::kNeg || op == OpId::kSub)) {
    return InvalidInputs(op, in,
                         "bool tensors do not support negation/subtraction");
  }
  if (HasFloatResult(op)) dt = ToFloat(dt);
  if (IsCompare(op)) dt = DType::kBool;
  return TensorType{dt, shape};
}

// Reductions drop the reduced dims (or keep them as 1); sum widens integers
// to i64, argmax gives i64 and mean/var need a float.
absl::StatusOr<TensorType> InferReduction(OpId op,
                                          absl::Span<const TensorType> in,
                                          const Attrs& attrs) {
  const TensorType& x = in[0];
  std::vector<int64_t> dims = attrs.GetInts(AttrKey::kDims);
  if (op == OpId::kArgmax) dims = {attrs.GetInt(AttrKey::kDim)};
  auto norm = NormalizeDims(dims, static_cast<int64_t>(x.shape.size()));
  if (!norm.ok()) return InvalidInputs(op, in, norm.status().message());
  const bool keepdim = attrs.GetBool(AttrKey::kKeepdim);
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(x.shape.size()); ++d) {
    bool reduced = std::find(norm->begin(), norm->end(), d) != norm->end();
    if (reduced && x.shape[d] == 0 &&
        (op == OpId::kAmax || op == OpId::kArgmax)) {
      return InvalidInputs(op, in,
                           absl::StrCat("cannot reduce over dim ", d,
                                        " of size 0 (no identity)"));
    }
    if (!reduced) {
      out.push_back(x.shape[d]);
    } else if (keepdim)
      out.push_back(1);
  }
  DType dt = x.dtype;
  switch (op) {
    case OpId::kSum:
      dt = IsFloating(x.dtype) ? x.dtype : DType::kI64;
      break;
    case OpId::kMean:
    case OpId::kVar:
      if (!IsFloating(x.dtype)) {
        return InvalidInputs(op, in, "needs a floating-point input");
      }
      break;
    case OpId::kArgmax:
      dt = DType::kI64;
      break;
    default:
      break;
  }
  return TensorType{dt, out};
}

// Softmax and log_softmax keep their float input's type; `dim` must exist.
absl::StatusOr<TensorType> InferSoftmax(OpId op,
                                        absl::Span<const TensorType> in,
                                        const Attrs& attrs) {
  const int64_t rank = static_cast<int64_t>(in[0].shape.size());
  if (WrapDim(attrs.GetInt(AttrKey::kDim), rank) < 0) {
    return InvalidInputs(
        op, in,
        absl::StrCat("dim ", attrs.GetInt(AttrKey::kDim), " out of range"));
  }
  if (!IsFloating(in[0].dtype)) {
    return InvalidInputs(op, in, "needs a float input");
  }
  return in[0];
}

// Layer norm keeps its float input's type; weight/bias have the shape of the
// last `normalized_ndim` dims.
absl::StatusOr<TensorType> InferLayerNorm(OpId op,
                                          absl::Span<const TensorType> in,
                                          const Attrs& attrs) {
  const int64_t rank = static_cast<int64_t>(in[0].shape.size());
  const int64_t k = AttrInt(op, attrs, AttrKey::kNormalizedNdim);
  if (k < 1 || k > rank) {
    return InvalidInputs(
        op, in, absl::StrCat("normalized_ndim ", k, " must be in [1, rank]"));
  }
  ShapeRef norm = ShapeRef(in[0].shape).subspan(rank - k);
  for (size_t i = 1; i < in.size(); ++i) {
    if (ShapeRef(in[i].shape) != norm) {
      return InvalidInputs(
          op, in,
          absl::StrCat("weight/bias must have the normalized shape ",
                       ShapeToString(norm)));
    }
  }
  if (!IsFloating(in[0].dtype)) {
    return InvalidInputs(op, in, "needs a float input");
  }
  return in[0];
}

// Row-wise normalizations: the output has the input's type.
absl::StatusOr<TensorType> InferNormalization(OpId op,
                                              absl::Span<const TensorType> in,
                                              const Attrs& attrs) {
  switch (op) {
    case OpId::kSoftmax:
    case OpId::kLogSoftmax:
      return InferSoftmax(op, in, attrs);
    case OpId::kLayerNorm:
      return InferLayerNorm(op, in, attrs);
    default:
      return InvalidInputs(op, in, "no type rule");
  }
}

// A loss's `reduction` attribute: "none" keeps the per-element `unreduced`
// type, "mean" and "sum" give a 0-d result of the same dtype.
absl::StatusOr<TensorType> ReducedLossType(OpId op,
                                           absl::Span<const TensorType> in,
                                           const Attrs& attrs,
                                           TensorType unreduced) {
  std::string red = AttrString(op, attrs, AttrKey::kReduction);
  if (red == "none") return unreduced;
  if (red != "mean" && red != "sum") {
    return InvalidInputs(
        op, in,
        absl::StrCat("reduction must be mean, sum or none, got '", red, "'"));
  }
  // A 0-d result: the unreduced type with its shape dropped (built in place:
  // GCC 12 warns on a braced temporary with an empty InlinedVector here).
  unreduced.shape.clear();
  return unreduced;
}

// Cross entropy of float logits [N, C] against i64 class targets [N].
absl::StatusOr<TensorType> InferCrossEntropy(OpId op,
                                             absl::Span<const TensorType> in,
                                             const Attrs& attrs) {
  if (in[0].shape.size() != 2 || in[1].shape.size() != 1 ||
      in[1].shape[0] != in[0].shape[0]) {
    return InvalidInputs(op, in, "expects logits [N, C] and targets [N]");
  }
  if (in[1].dtype != DType::kI64) {
    return InvalidInputs(op, in, "targets must be i64");
  }
  if (!IsFloating(in[0].dtype)) {
    return InvalidInputs(op, in, "logits must be float");
  }
  return ReducedLossType(op, in, attrs,
                         TensorType{in[0].dtype, {in[0].shape[0]}});
}

// Mean squared error of an input against a target of the same float type.
absl::StatusOr<TensorType> InferMseLoss(OpId op,
                                        absl::Span<const TensorType> in,
                                        const Attrs& attrs) {
  if (in[0].shape != in[1].shape) {
    return InvalidInputs(op, in, "input and target must have the same shape");
  }
  if (!IsFloating(in[0].dtype) || in[0].dtype != in[1].dtype) {
    return InvalidInputs(op, in,
                         "input and target must have the same float dtype");
  }
  return ReducedLossType(op, in, attrs, in[0]);
}

// Losses: per-row or per-element values, reduced as `reduction` asks.
absl::StatusOr<TensorType> InferLoss(OpId op, absl::Span<const TensorType> in,
                                     const Attrs& attrs) {
  switch (op) {
    case OpId::kCrossEntropy:
      return InferCrossEntropy(op, in, attrs);
    case OpId::kMseLoss:
      return InferMseLoss(op, in, attrs);
    default:
      return InvalidInputs(op, in, "no type rule");
  }
}

// Permute reorders the dims; `dims` must be a permutation of [0, rank).
absl::StatusOr<TensorType> InferPermute(OpId op,
                                        absl::Span<const TensorType> in,
                                        const Attrs& attrs) {
  const int64_t rank = static_cast<int64_t>(in[0].shape.size());
  std::vector<int64_t> dims = attrs.GetInts(AttrKey::kDims);
  if (static_cast<int64_t>(dims.size()) != rank) {
    return InvalidInputs(
        op, in,
        absl::StrCat("permutation [", absl::StrJoin(dims, ", "),
                     "] does not have ", rank, " dims"));
  }
  std::vector<int64_t> seen(rank, 0);
  Shape out;
  for (int64_t d : dims) {
    int64_t w = WrapDim(d, rank);
    if (w < 0 || seen[w]++) {
      return InvalidInputs(op, in,
                           absl::StrCat("[", absl::StrJoin(dims, ", "),
                                        "] is not a permutation"));
    }
    out.push_back(in[0].shape[w]);
  }
  return TensorType{in[0].dtype, out};
}

// Slice clamps start/end into the dim as Python slicing does, then strides.
absl::StatusOr<TensorType> InferSlice(OpId op, absl::Span<const TensorType> in,
                                      const Attrs& attrs) {
  const int64_t rank = static_cast<int64_t>(in[0].shape.size());
  int64_t d = WrapDim(attrs.GetInt(AttrKey::kDim), rank);
  int64_t step = AttrInt(op, attrs, AttrKey::kStep);
  if (d < 0 || rank == 0) {
    return InvalidInputs(op, in, "slice dim out of range");
  }
  if (step <= 0) {
    return InvalidInputs(op, in,
                         absl::StrCat("slice step must be > 0, got ", step));
  }
  int64_t size = in[0].shape[d];
  int64_t start = attrs.GetInt(AttrKey::kStart);
  int64_t end = attrs.GetInt(AttrKey::kEnd);
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  Shape out = in[0].shape;
  out[d] = end == start ? 0 : (end - start - 1) / step + 1;  // no overflow
  return TensorType{in[0].dtype, out};
}

// Expand broadcasts size-1 dims (and adds leading ones); -1 keeps a dim.
absl::StatusOr<TensorType> InferExpand(OpId op, absl::Span<const TensorType> in,
                                       const Attrs& attrs) {
  const int64_t rank = static_cast<int64_t>(in[0].shape.size());
  std::vector<int64_t> to = attrs.GetInts(AttrKey::kShape);
  if (to.size() < static_cast<size_t>(rank)) {
    return InvalidInputs(op, in,
                         absl::StrCat("cannot expand to fewer dims: [",
                                      absl::StrJoin(to, ", "), "]"));
  }
  Shape out(to.begin(), to.end());
  const size_t lead = to.size() - rank;
  for (int64_t i = 0; i < rank; ++i) {
    int64_t have = in[0].shape[i], want = to[lead + i];
    if (want == -1) want = have;
    if (have != want && have != 1) {
      return InvalidInputs(op, in,
                           absl::StrCat("cannot expand dim ", i, " of size ",
                                        have, " to ", want));
    }
    out[lead + i] = want;
  }
  return TensorType{in[0].dtype, out};
}

// Squeeze drops the listed size-1 dims (all size-1 dims when none are listed).
TensorType InferSqueeze(absl::Span<const TensorType> in, const Attrs& attrs) {
  const int64_t rank = static_cast<int64_t>(in[0].shape.size());
  std::vector<int64_t> dims = attrs.GetInts(AttrKey::kDims);
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    bool listed = dims.empty();
    for (int64_t d : dims) listed |= WrapDim(d, rank) == i;
    if (!(listed && in[0].shape[i] == 1)) out.push_back(in[0].shape[i]);
  }
  return TensorType{in[0].dtype, out};
}

// Unsqueeze inserts a size-1 dim at `dim` of the result.
absl::StatusOr<TensorType> InferUnsqueeze(OpId op,
                                          absl::Span<const TensorType> in,
                                          const Attrs& attrs) {
  const int64_t rank = static_cast<int64_t>(in[0].shape.size());
  int64_t d = WrapDim(attrs.GetInt(AttrKey::kDim), rank + 1);
  if (d < 0) return InvalidInputs(op, in, "unsqueeze dim out of range");
  Shape out = in[0].shape;
  out.insert(out.begin() + d, 1);
  return TensorType{in[0].dtype, out};
}

// Views keep the input's dtype and change only the shape.
absl::StatusOr<TensorType> InferView(OpId op, absl::Span<const TensorType> in,
                                     const Attrs& attrs) {
  switch (op) {
    case OpId::kReshape: {
      auto s = InferReshape(in[0].shape, attrs.GetInts(AttrKey::kShape));
      if (!s.ok()) return InvalidInputs(op, in, s.status().message());
      return TensorType{in[0].dtype, *s};
    }
    case OpId::kPermute:
      return InferPermute(op, in, attrs);
    case OpId::kSlice:
      return InferSlice(op, in, attrs);
    case OpId::kExpand:
      return InferExpand(op, in, attrs);
    case OpId::kSqueeze:
      return InferSqueeze(in, attrs);
    case OpId::kUnsqueeze:
      return InferUnsqueeze(op, in, attrs);
    default:
      return InvalidInputs(op, in, "no type rule");
  }
}

// Embedding gathers rows of a float [num_embeddings, dim] weight: the result
// is indices.shape + [dim].
absl::StatusOr<TensorType> InferEmbedding(OpId op,
                                          absl::Span<const TensorType> in) {
  if (in[0].shape.size() != 2 || !IsFloating(in[0].dtype)) {
    return InvalidInputs(op, in,
                         "weight must be a float [num_embeddings, dim] tensor");
  }
  if (!IsIntegral(in[1].dtype)) {
    return InvalidInputs(op, in, "indices must be i64 or i32");
  }
  Shape out = in[1].shape;
  out.push_back(in[0].shape[1]);
  return TensorType{in[0].dtype, out};
}

// Embedding's backward scatters a grad of indices.shape + [dim] into a
// [num_weights, dim] weight gradient.
absl::StatusOr<TensorType> InferEmbeddingBackward(
    OpId op, absl::Span<const TensorType> in, const Attrs& attrs) {
  Shape expect = in[1].shape;
  if (in[0].shape.empty()) {
    return InvalidInputs(op, in, "grad must have a trailing dim");
  }
  expect.push_back(in[0].shape.back());
  if (expect != in[0].shape) {
    return InvalidInputs(op, in, "grad must be indices.shape + [dim]");
  }
  return TensorType{in[0].dtype,
                    {attrs.GetInt(AttrKey::kNumWeights), in[0].shape.back()}};
}

// Data movement: copies, gathers and scatters; shapes come from the operands
// or from attributes that name the destination.
// cat: operands of one rank, equal sizes except along `dim`, whose sizes
// add up; the result has the promoted dtype of the operands.
absl::StatusOr<TensorType> InferCat(OpId op, absl::Span<const TensorType> in,
                                    const Attrs& attrs) {
  const int64_t rank = static_cast<int64_t>(in[0].shape.size());
  if (rank == 0)
    return InvalidInputs(op, in, "operands must have a dim to join along");
  const int64_t dim = AttrInt(op, attrs, AttrKey::kDim);
  if (dim < -rank || dim >= rank) {
    return InvalidInputs(
        op, in, absl::StrCat("dim ", dim, " is out of range for rank ", rank));
  }
  const int64_t d = WrapDim(dim, rank);
  Shape out = in[0].shape;
  out[d] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Shape& s = in[i].shape;
    bool same = static_cast<int64_t>(s.size()) == rank;
    for (int64_t k = 0; same && k < rank; ++k)
      same = k == d || s[k] == in[0].shape[k];
    if (!same) {
      return InvalidInputs(
          op, in,
          absl::StrCat("operand ", i, " of shape ", ShapeToString(s),
                       " differs from operand 0's ", ShapeToString(in[0].shape),
                       " outside dim ", d));
    }
    out[d] += s[d];
  }
  return TensorType{ResultType(in), out};
}

// topk: `k` elements of a rank >= 1 operand along `dim`.
absl::StatusOr<TensorType> InferTopk(OpId op, absl::Span<const TensorType> in,
                                     const Attrs& attrs) {
  const int64_t rank = static_cast<int64_t>(in[0].shape.size());
  if (rank == 0) return InvalidInputs(op, in, "needs an operand of rank >= 1");
  if (in[0].dtype == DType::kBool)
    return InvalidInputs(op, in, "needs numbers, got bool");
  const int64_t dim = AttrInt(op, attrs, AttrKey::kDim);
  if (dim < -rank || dim >= rank) {
    return InvalidInputs(
        op, in, absl::StrCat("dim ", dim, " is out of range for rank ", rank));
  }
  const int64_t d = WrapDim(dim, rank);
  const int64_t k = AttrInt(op, attrs, AttrKey::kK);
  if (k < 0 || k > in[0].shape[d]) {
    return InvalidInputs(op, in,
                         absl::StrCat("k must be in [0, ", in[0].shape[d],
                                      "] (the size of dim ", d, "), got ", k));
  }
  Shape out = in[0].shape;
  out[d] = k;
  return TensorType{
      attrs.GetBool(AttrKey::kIndices) ? DType::kI64 : in[0].dtype, out};
}

absl::StatusOr<TensorType> InferDataMovement(OpId op,
                                             absl::Span<const TensorType> in,
                                             const Attrs& attrs) {
  switch (op) {
    case OpId::kContiguous:
      return in[0];
    case OpId::kEmbedding:
      return InferEmbedding(op, in);
    case OpId::kEmbeddingBackward:
      return InferEmbeddingBackward(op, in, attrs);
    case OpId::kSliceBackward: {
      // The grad is the slice's result: the input shape sliced as the
      // attributes say.
      std::vector<int64_t> s = attrs.GetInts(AttrKey::kInputShape);
      const TensorType input{in[0].dtype, Shape(s.begin(), s.end())};
      if (absl::Status st = ValidateShape(input.shape); !st.ok())
        return InvalidInputs(op, in,
                             absl::StrCat("input_shape: ", st.message()));
      const TensorType in_type[] = {input};
      absl::StatusOr<TensorType> sliced =
          InferSlice(OpId::kSlice, in_type, attrs);
      if (!sliced.ok()) return InvalidInputs(op, in, sliced.status().message());
      if (sliced->shape != in[0].shape) {
        return InvalidInputs(
            op, in,
            absl::StrCat("grad of shape ", ShapeToString(in[0].shape),
                         " is not the slice's result ",
                         ShapeToString(sliced->shape), " of input_shape ",
                         ShapeToString(input.shape)));
      }
      return input;
    }
    case OpId::kCat:
      return InferCat(op, in, attrs);
    case OpId::kTopk:
      return InferTopk(op, in, attrs);
    case OpId::kOneHot: {
      if (!IsIntegral(in[0].dtype)) {
        return InvalidInputs(op, in, "indices must be integers");
      }
      Shape out = in[0].shape;
      out.push_back(attrs.GetInt(AttrKey::kNumClasses));
      return TensorType{attrs.GetDType(AttrKey::kDTypeAttr), out};
    }
    default:
      return InvalidInputs(op, in, "no type rule");
  }
}

// Factories and random ops: those without operands make a tensor of the
// `shape` and `dtype` attributes; dropout keeps its operand's type;
// multinomial draws `num_samples` i64 indices per row of its operand.
absl::StatusOr<TensorType> InferGenerator(OpId op,
                                          absl::Span<const TensorType> in,
                                          const Attrs& attrs) {
  if (TakesRandomState(op, in.size())) {
    const TensorType& state = in.back();
    if (state.dtype != DType::kI64 || state.shape != Shape{2}) {
      return InvalidInputs(op, in,
                           "its last operand, the graph's random state, must "
                           "be i64[2] (seed, shift)");
    }
    in.remove_suffix(1);
  }
  if (op == OpId::kMultinomial) {
    if (!IsFloating(in[0].dtype) || in[0].shape.empty() ||
        in[0].shape.back() == 0) {
      return InvalidInputs(op, in,
                           "needs floating-point weights with a non-empty "
                           "last dim of categories");
    }
    const int64_t n = in[0].shape.back();
    const int64_t samples = AttrInt(op, attrs, AttrKey::kNumSamples);
    const bool replacement = attrs.GetBool(AttrKey::kReplacement);
    if (samples < 1 || (!replacement && samples > n)) {
      return InvalidInputs(
          op, in,
          absl::StrCat("num_samples must be >= 1",
                       replacement ? ""
                                   : absl::StrCat(" and <= ", n,
                                                  " (the categories) without "
                                                  "replacement"),
                       ", got ", samples));
    }
    Shape out = in[0].shape;
    out.back() = samples;
    return TensorType{DType::kI64, out};
  }
  if (!in.empty()) return in[0];
  std::vector<int64_t> s = attrs.GetInts(AttrKey::kShape);
  for (int64_t d : s) {
    if (d < 0) return InvalidInputs(op, in, absl::StrCat("negative size ", d));
  }
  return TensorType{attrs.GetDType(AttrKey::kDTypeAttr),
                    Shape(s.begin(), s.end())};
}

// In-place updates keep the target's type; every operand broadcasts to it,
// and arithmetic (not copy_/fill_) needs a floating-point target.
absl::StatusOr<TensorType> InferInplaceUpdate(OpId op,
                                              absl::Span<const TensorType> in) {
  for (size_t i = 1; i < in.size(); ++i) {
    auto b = BroadcastShapes(in[0].shape, in[i].shape);
    if (!b.ok() || *b != in[0].shape) {
      return InvalidInputs(
          op, in,
          absl::StrCat("operand ", i, " of shape ", ShapeToString(in[i].shape),
                       " does not broadcast to ", ShapeToString(in[0].shape)));
    }
  }
  if (op != OpId::kCopyInplace && op != OpId::kFillInplace &&
      !IsFloating(in[0].dtype)) {
    return InvalidInputs(op, in,
                         "in-place arithmetic needs a floating-point target");
  }
  return in[0];
}

// barrier's result: a 0-d f32 token (a copy of one constant).
const TensorType& BarrierToken() {
  static const TensorType token{DType::kF32, {}};
  return token;
}

// Collectives (dist/dist.h): all_reduce and broadcast keep the
// operand's type; all_gather stacks `world_size` operands along dim 0.
absl::StatusOr<TensorType> InferCollective(OpId op,
                                           absl::Span<const TensorType> in,
                                           const Attrs& attrs) {
  if (op == OpId::kBarrier) return BarrierToken();
  const TensorType& x = in[0];
  if (op == OpId::kAllReduce) {
    const std::string r = AttrString(op, attrs, AttrKey::kReduceOp);
    if (r != "sum" && r != "avg" && r != "max") {
      return InvalidInputs(op, in,
                           absl::StrCat("reduce_op must be \"sum\", \"avg\" or "
                                        "\"max\", got \"",
                                        r, "\""));
    }
    if (r == "avg" && !IsFloating(x.dtype)) {
      return InvalidInputs(op, in,
                           "reduce_op \"avg\" needs a floating-point operand");
    }
    if (x.dtype == DType::kBool && r == "sum") {
      return InvalidInputs(
          op, in, "reduce_op \"sum\" of bool; use \"max\" (logical or)");
    }
    return x;
  }
  if (op == OpId::kBroadcast) {
    if (AttrInt(op, attrs, AttrKey::kRoot) < 0) {
      return InvalidInputs(op, in,
                           absl::StrCat("root must be >= 0, got ",
                                        attrs.GetInt(AttrKey::kRoot)));
    }
    return x;
  }
  const int64_t world = AttrInt(op, attrs, AttrKey::kWorldSize);
  if (world < 1) {
    return InvalidInputs(op, in,
                         absl::StrCat("world_size must be >= 1, got ", world));
  }
  TensorType out = x;
  if (out.shape.empty()) {
    out.shape = {world};
  } else {
    if (out.shape[0] > (int64_t{1} << 56) / world) {
      return InvalidInputs(op, in, "the gathered dim 0 overflows");
    }
    out.shape[0] *= world;
  }
  return out;
}

// The op table's arity bounds; the error gives the expected count or range.
absl::Status CheckArity(OpId op, absl::Span<const TensorType> in) {
  const OpInfo& info = GetOpInfo(op);
  const int n = static_cast<int>(in.size());
  if (n >= info.min_arity && n <= info.max_arity) return absl::OkStatus();
  return InvalidInputs(op, in,
                       absl::StrCat("expects ", info.min_arity,
                                    info.min_arity == info.max_arity
                                        ? ""
                                        : absl::StrCat("..", info.max_arity),
                                    " inputs, got ", n));
}

}  // namespace

absl::Status InvalidInputs(OpId op, absl::Span<const TensorType> in,
                           absl::string_view problem) {
  std::vector<std::string> parts;
  for (const auto& t : in) parts.push_back(Describe(t));
  return absl::InvalidArgumentError(absl::StrCat(
      OpName(op), "(", absl::StrJoin(parts, ", "), "): ", problem));
}

absl::StatusOr<Shape> BroadcastShapes(ShapeRef a, ShapeRef b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shapes ", ShapeToString(a), " and ", ShapeToString(b),
          " are not broadcastable (dim ", i, ": ", da, " vs ", db, ")"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

DType ResultType(absl::Span<const TensorType> inputs) {
  std::optional<DType> dimmed, zero_dim;
  for (const auto& t : inputs) {
    auto& slot = t.shape.empty() ? zero_dim : dimmed;
    slot = slot ? PromoteTypes(*slot, t.dtype) : t.dtype;
  }
  if (!dimmed) return *zero_dim;
  if (zero_dim && Category(*zero_dim) > Category(*dimmed)) {
    return Category(*zero_dim) == 2 ? DType::kF32 : *zero_dim;
  }
  return *dimmed;
}

absl::StatusOr<std::vector<int64_t>> NormalizeDims(std::vector<int64_t> dims,
                                                   int64_t rank) {
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
    return dims;
  }
  for (auto& d : dims) {
    int64_t w = WrapDim(d, rank);
    if (w < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dim ", d, " is out of range for a tensor of rank ", rank));
    }
    d = rank == 0 ? 0 : w;
  }
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dims [", absl::StrJoin(dims, ", "), "] repeat a dim"));
  }
  if (rank == 0) dims.clear();
  return dims;
}

absl::StatusOr<Shape> InferReshape(ShapeRef from, std::vector<int64_t> to) {
  const int64_t numel = NumElements(from);
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i] == -1) {
      if (infer_at >= 0) {
        return absl::InvalidArgumentError("reshape: only one dim may be -1");
      }
      infer_at = static_cast<int64_t>(i);
    } else if (to[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reshape: invalid size ", to[i]));
    } else if (!CheckedMul(known, to[i], &known) || known > kMaxNumElements) {
      return absl::InvalidArgumentError(
          absl::StrCat("reshape: [", absl::StrJoin(to, ", "),
                       "] has more than 2^56 elements"));
    }
  }
  if (infer_at >= 0 && known != 0 && numel % known == 0) {
    to[infer_at] = numel / known;
    known = numel;
  }
  if (known != numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape ", ShapeToString(from), " (", numel,
                     " elements) to [", absl::StrJoin(to, ", "), "]"));
  }
  return Shape(to.begin(), to.end());
}

namespace {

absl::StatusOr<TensorType> InferTypeOf(OpId op, absl::Span<const TensorType> in,
                                       const Attrs& attrs) {
  switch (GetOpInfo(op).kind) {
    case OpKind::kElementwise:
      return InferElementwise(op, in, attrs);
    case OpKind::kReduction:
      return InferReduction(op, in, attrs);
    case OpKind::kNormalization:
      return InferNormalization(op, in, attrs);
    case OpKind::kLoss:
      return InferLoss(op, in, attrs);
    case OpKind::kMatmul:
      return InferMatmul(in, attrs);
    case OpKind::kView:
      return InferView(op, in, attrs);
    case OpKind::kDataMovement:
      return InferDataMovement(op, in, attrs);
    case OpKind::kFactory:
    case OpKind::kRandom:
      return InferGenerator(op, in, attrs);
    case OpKind::kInplaceUpdate:
      return InferInplaceUpdate(op, in);
    case OpKind::kCollective:
      return InferCollective(op, in, attrs);
    case OpKind::kConvolution:
      return InferConvolution(op, in, attrs);
  }
  return InvalidInputs(op, in, "no type rule");
}

}  // namespace

// Operands and result are valid tensor shapes (ir::ValidateShape): sizes
// an attribute names (reshape, expand, one_hot's classes, an embedding
// gradient's rows) are checked here, once for every op.
absl::StatusOr<TensorType> InferType(OpId op, absl::Span<const TensorType> in,
                                     const Attrs& attrs) {
  RETURN_IF_ERROR(CheckArity(op, in));
  for (const TensorType& t : in) {
    if (absl::Status st = ValidateShape(t.shape); !st.ok())
      return InvalidInputs(op, in, st.message());
  }
  ASSIGN_OR_RETURN(TensorType out, InferTypeOf(op, in, attrs));
  if (absl::Status st = ValidateShape(out.shape); !st.ok()) {
    return InvalidInputs(op, in, absl::StrCat("the result's ", st.message()));
  }
  return out;
}

absl::StatusOr<std::vector<TensorType>> InferTypes(
    OpId op, absl::Span<const TensorType> inputs, const Attrs& attrs,
    int num_results) {
  ASSIGN_OR_RETURN(TensorType first, InferType(op, inputs, attrs));
  std::vector<TensorType> types;
  types.push_back(std::move(first));
  if (num_results == 1) return types;
  if (op != OpId::kMatmul || num_results != 2) {
    return InvalidInputs(
        op, inputs,
        absl::StrCat("expects 1 result",
                     op == OpId::kMatmul
                         ? ", or 2 with epilogue = \"bgrad\" (the product "
                           "and the bias gradient)"
                         : "",
                     ", got ", num_results));
  }
  ASSIGN_OR_RETURN(TensorType bias_grad, InferMatmulBiasGrad(inputs, attrs));
  types.push_back(std::move(bias_grad));
  return types;
}

}  // namespace stepjit::ir
