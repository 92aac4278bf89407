// Gradient rules: one case per differentiable op of ir/ops.def.
#include "runtime/autograd/grad_rules.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ir/infer.h"
#include "ir/op_attrs.h"
#include "ir/status.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

namespace stepjit::autograd {

using ir::AttrKey;
using ir::OpId;

namespace {

Tensor Zero(const Tensor& like) { return wrap_scalar(0.0, like); }

// Reduced dims of a reduction, normalized against the input rank.
std::vector<int64_t> ReducedDims(const GradContext& c) {
  std::vector<int64_t> dims = c.op == OpId::kArgmax
                                  ? std::vector<int64_t>{c.attrs.GetInt(AttrKey::kDim)}
                                  : c.attrs.GetInts(AttrKey::kDims);
  return ValueOrThrow(ir::NormalizeDims(dims, c.inputs[0].dim()));
}

// Reshapes a reduction's gradient so that it broadcasts against the input.
Tensor KeepDims(const GradContext& c, const Tensor& g) {
  if (c.attrs.GetBool(AttrKey::kKeepdim)) return g;
  Shape shape = c.inputs[0].shape();
  for (int64_t d : ReducedDims(c)) shape[d] = 1;
  return g.reshape(shape);
}

int64_t ReducedCount(const GradContext& c) {
  int64_t n = 1;
  for (int64_t d : ReducedDims(c)) n *= c.inputs[0].shape()[d];
  return n;
}

// `attrs` with `key` set to `shape`.
ir::Attrs WithShape(const ir::Attrs& attrs, AttrKey key, ShapeRef shape) {
  ir::Attrs out = attrs;
  out.Set(key, std::vector<int64_t>(shape.begin(), shape.end()));
  return out;
}

// conv2d's input and weight gradients are their own ops (the transposed
// convolutions); the bias's is the output gradient summed over all but the
// channel dim.
std::vector<Tensor> Conv2dGrads(const GradContext& c, const Tensor& g) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  std::vector<Tensor> grads(c.inputs.size());
  if (c.needs[0]) {
    grads[0] =
        runtime::Dispatch(OpId::kConv2dBackwardInput, {g, w},
                          WithShape(c.attrs, AttrKey::kInputShape, x.shape()));
  }
  if (c.needs[1]) {
    grads[1] =
        runtime::Dispatch(OpId::kConv2dBackwardWeight, {g, x},
                          WithShape(c.attrs, AttrKey::kShape, w.shape()));
  }
  if (c.inputs.size() == 3 && c.needs[2]) grads[2] = sum(g, {0, 2, 3});
  return grads;
}

std::vector<Tensor> MatmulGrads(const GradContext& c, const Tensor& g) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const bool ta = c.attrs.GetBool(AttrKey::kTransposeA);
  const bool tb = c.attrs.GetBool(AttrKey::kTransposeB);
  Tensor ga, gb;
  // With C = op(A) op(B): d op(A) = G op(B)^T, d op(B) = op(A)^T G, then
  // each is transposed back when the operand was stored transposed.
  if (c.needs[0]) {
    ga = ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb);
  }
  if (c.needs[1]) {
    gb = tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false);
  }
  return {ga, gb};
}

// Each selected value's gradient goes back to its position: the positions
// (topk with indices = true) flattened over rows of the selected dim, and
// the gradient scattered there by embedding_backward (one-wide rows).
Tensor TopkGrad(const GradContext& c, const Tensor& g) {
  const Tensor& x = c.inputs[0];
  const int64_t d =
      ir::WrapDim(ir::AttrInt(c.op, c.attrs, ir::AttrKey::kDim), x.dim());
  ir::Attrs index_attrs = c.attrs;
  index_attrs.Set(AttrKey::kIndices, true);
  const Tensor idx = runtime::Dispatch(OpId::kTopk, {x}, index_attrs);
  std::vector<int64_t> perm, inverse(static_cast<size_t>(x.dim()));
  Shape rows_shape, base_shape;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i == d) continue;
    perm.push_back(i);
    rows_shape.push_back(x.shape()[i]);
    base_shape.push_back(x.shape()[i]);
  }
  perm.push_back(d);
  rows_shape.push_back(x.shape()[d]);
  base_shape.push_back(1);
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = static_cast<int64_t>(i);
  const int64_t n = x.shape()[d], rows = x.numel() / std::max<int64_t>(n, 1);
  const Tensor base =
      arange(0, static_cast<double>(rows * n), static_cast<double>(n),
             {.dtype = DType::kI64, .device = x.device()})
          .reshape(base_shape);
  const Tensor flat = (idx.permute(perm) + base).reshape({-1});
  const Tensor scattered =
      embedding_backward(g.permute(perm).reshape({-1, 1}), flat, rows * n);
  return scattered.reshape(rows_shape).permute(inverse);
}

std::vector<Tensor> LayerNormGrads(const GradContext& c, const Tensor& g) {
  const Tensor& x = c.inputs[0];
  const int64_t k = ir::AttrInt(c.op, c.attrs, ir::AttrKey::kNormalizedNdim);
  const double eps = ir::AttrFloat(c.op, c.attrs, ir::AttrKey::kEps);
  std::vector<int64_t> norm_dims, lead_dims;
  for (int64_t d = 0; d < x.dim(); ++d) (d >= x.dim() - k ? norm_dims : lead_dims).push_back(d);
  const Tensor mu = mean(x, norm_dims, true);
  const Tensor rstd = rsqrt(var(x, norm_dims, 0, true) + eps);
  const Tensor xhat = (x - mu) * rstd;
  const bool has_w = c.inputs.size() > 1;
  const Tensor gxhat = has_w ? g * c.inputs[1] : g;
  std::vector<Tensor> out(c.inputs.size());
  if (c.needs[0]) {
    out[0] = rstd * (gxhat - mean(gxhat, norm_dims, true) -
                     xhat * mean(gxhat * xhat, norm_dims, true));
  }
  if (has_w && c.needs[1]) out[1] = sum(g * xhat, lead_dims, false);
  if (c.inputs.size() > 2 && c.needs[2]) out[2] = sum(g, lead_dims, false);
  return out;
}

std::vector<Tensor> CrossEntropyGrads(const GradContext& c, const Tensor& g) {
  const Tensor &x = c.inputs[0], &t = c.inputs[1];
  const int64_t n = x.shape()[0], classes = x.shape()[1];
  const double ls = ir::AttrFloat(c.op, c.attrs, ir::AttrKey::kLabelSmoothing);
  const std::string red =
      ir::AttrString(c.op, c.attrs, ir::AttrKey::kReduction);
  Tensor target = one_hot(t, classes, x.dtype());
  if (ls > 0) target = target * (1.0 - ls) + ls / static_cast<double>(classes);
  Tensor scale = red == "none" ? g.unsqueeze(1) : g;
  if (red == "mean") scale = scale / static_cast<double>(n);
  return {(softmax(x, 1) - target) * scale, Tensor()};
}

}  // namespace

std::vector<Tensor> ComputeGrads(const GradContext& c, const Tensor& g) {
  const absl::Span<const Tensor> in = c.inputs;
  const Tensor& y = c.output;
  switch (c.op) {
    case OpId::kNeg: return {-g};
    case OpId::kAbs: return {g * sign(in[0])};
    // A defined zero, not an undefined gradient: the engine only runs nodes
    // that received a gradient, so an undefined one would stall other paths.
    case OpId::kSign: return {zeros_like(in[0])};
    case OpId::kExp: return {g * y};
    case OpId::kLog: return {g / in[0]};
    case OpId::kSqrt: return {g * 0.5 / y};
    case OpId::kRsqrt: return {g * (y * y * y) * -0.5};
    case OpId::kReciprocal: return {-(g * y * y)};
    case OpId::kTanh: return {g * (1.0 - y * y)};
    case OpId::kErf:
      return {g * (2.0 / std::sqrt(std::numbers::pi)) * exp(-(in[0] * in[0]))};
    case OpId::kSigmoid: return {g * y * (1.0 - y)};
    case OpId::kRelu: return {where(gt(y, Zero(y)), g, Zero(g))};
    case OpId::kGelu: {
      const Tensor& x = in[0];
      const Tensor cdf = (erf(x * std::numbers::sqrt2 / 2.0) + 1.0) * 0.5;
      const Tensor pdf = exp(x * x * -0.5) * (1.0 / std::sqrt(2.0 * std::numbers::pi));
      return {g * (cdf + x * pdf)};
    }
    case OpId::kGeluTanh: {
      const Tensor& x = in[0];
      const double k = std::sqrt(2.0 / std::numbers::pi), c3 = 0.044715;
      const Tensor th = tanh((x + x * x * x * c3) * k);
      const Tensor d = (th + 1.0) * 0.5 +
                       x * 0.5 * (1.0 - th * th) * ((x * x * (3.0 * c3) + 1.0) * k);
      return {g * d};
    }
    case OpId::kSilu: {
      // d/dx x s(x) = s + x s (1 - s), s = sigmoid(x).
      const Tensor s = sigmoid(in[0]);
      return {g * s * (in[0] * (1.0 - s) + 1.0)};
    }
    case OpId::kSin: return {g * cos(in[0])};
    case OpId::kCos: return {-(g * sin(in[0]))};
    case OpId::kCast: return {g};
    case OpId::kAdd: return {g, g};
    case OpId::kSub: return {g, -g};
    case OpId::kMul:
      return {c.needs[0] ? g * in[1] : Tensor(), c.needs[1] ? g * in[0] : Tensor()};
    case OpId::kDiv:
      return {c.needs[0] ? g / in[1] : Tensor(), c.needs[1] ? -(g * y / in[1]) : Tensor()};
    case OpId::kPow:
      return {c.needs[0] ? g * in[1] * pow(in[0], in[1] - 1.0) : Tensor(),
              c.needs[1] ? g * y * log(in[0]) : Tensor()};
    case OpId::kMaximum:
    case OpId::kMinimum: {
      // Ties split the gradient evenly, as PyTorch does.
      const Tensor wins = c.op == OpId::kMaximum ? gt(in[0], in[1]) : lt(in[0], in[1]);
      const Tensor share = cast(wins, g.dtype()) + cast(eq(in[0], in[1]), g.dtype()) * 0.5;
      return {g * share, g * (1.0 - share)};
    }
    case OpId::kWhere:
      return {Tensor(), where(in[0], g, Zero(g)), where(in[0], Zero(g), g)};
    case OpId::kSum: return {KeepDims(c, g).expand(in[0].shape())};
    case OpId::kMean:
      return {(KeepDims(c, g) / static_cast<double>(ReducedCount(c))).expand(in[0].shape())};
    case OpId::kAmax: {
      const Tensor mask = cast(eq(in[0], KeepDims(c, y)), g.dtype());
      return {mask * KeepDims(c, g) / sum(mask, ReducedDims(c), true)};
    }
    case OpId::kVar: {
      const int64_t n = ReducedCount(c) -
                        ir::AttrInt(c.op, c.attrs, ir::AttrKey::kCorrection);
      const Tensor mu = mean(in[0], ReducedDims(c), true);
      return {KeepDims(c, g) * (in[0] - mu) * (2.0 / static_cast<double>(n))};
    }
    case OpId::kSoftmax: {
      const int64_t d = c.attrs.GetInt(AttrKey::kDim);
      return {y * (g - sum(g * y, {d}, true))};
    }
    case OpId::kLogSoftmax: {
      const int64_t d = c.attrs.GetInt(AttrKey::kDim);
      return {g - exp(y) * sum(g, {d}, true)};
    }
    case OpId::kLayerNorm: return LayerNormGrads(c, g);
    case OpId::kCrossEntropy: return CrossEntropyGrads(c, g);
    case OpId::kMseLoss: {
      const std::string red =
          ir::AttrString(c.op, c.attrs, ir::AttrKey::kReduction);
      Tensor d = (in[0] - in[1]) * 2.0 * g;
      if (red == "mean") d = d / static_cast<double>(in[0].numel());
      return {d, -d};
    }
    case OpId::kMatmul: return MatmulGrads(c, g);
    case OpId::kConv2d:
      return Conv2dGrads(c, g);
    case OpId::kMaxPool2d:
      return {runtime::Dispatch(OpId::kMaxPool2dBackward, {g, c.inputs[0]},
                                c.attrs)};
    case OpId::kAvgPool2d:
      return {runtime::Dispatch(
          OpId::kAvgPool2dBackward, {g},
          WithShape(c.attrs, AttrKey::kInputShape, c.inputs[0].shape()))};
    case OpId::kReshape:
    case OpId::kSqueeze:
    case OpId::kUnsqueeze:
      return {g.reshape(in[0].shape())};
    case OpId::kPermute: {
      std::vector<int64_t> perm = c.attrs.GetInts(AttrKey::kDims);
      std::vector<int64_t> inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) {
        inverse[ir::WrapDim(perm[i], static_cast<int64_t>(perm.size()))] = static_cast<int64_t>(i);
      }
      return {g.permute(inverse)};
    }
    case OpId::kSlice:
      return {slice_backward(g, in[0].shape(), c.attrs.GetInt(AttrKey::kDim),
                             c.attrs.GetInt(AttrKey::kStart),
                             c.attrs.GetInt(AttrKey::kEnd),
                             ir::AttrInt(c.op, c.attrs, ir::AttrKey::kStep))};
    case OpId::kSliceBackward:
      return {g.slice(c.attrs.GetInt(AttrKey::kDim),
                      c.attrs.GetInt(AttrKey::kStart),
                      c.attrs.GetInt(AttrKey::kEnd),
                      ir::AttrInt(c.op, c.attrs, ir::AttrKey::kStep))};
    case OpId::kExpand:
    case OpId::kContiguous:
      return {g};
    case OpId::kCat: {
      // Each operand's window of the gradient.
      const int64_t d =
          ir::WrapDim(ir::AttrInt(c.op, c.attrs, ir::AttrKey::kDim), g.dim());
      std::vector<Tensor> grads;
      int64_t start = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        const int64_t len = in[i].shape()[d];
        grads.push_back(c.needs[i] ? g.slice(d, start, start + len) : Tensor());
        start += len;
      }
      return grads;
    }
    case OpId::kTopk:
      return {TopkGrad(c, g)};
    case OpId::kEmbedding:
      return {embedding_backward(g, in[1], in[0].shape()[0]), Tensor()};
    case OpId::kDropout:
      // The same seed and offset regenerate the same mask.
      return {runtime::Dispatch(OpId::kDropout, {g}, c.attrs)};
    default:
      SJ_CHECK(false, "no gradient rule for ", ir::OpName(c.op));
  }
  return {};
}

}  // namespace stepjit::autograd
