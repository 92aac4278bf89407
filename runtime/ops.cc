// Public op functions: thin wrappers that build attributes and call Dispatch.
#include "runtime/ops.h"

#include <algorithm>
#include <limits>

#include "ir/status.h"
#include "runtime/dispatch.h"

namespace stepjit {

using ir::AttrKey;
using ir::OpId;
using runtime::Dispatch;

namespace {
Tensor Unary(OpId op, const Tensor& x) { return Dispatch(op, {x}); }
Tensor Binary(OpId op, const Tensor& a, const Tensor& b) { return Dispatch(op, {a, b}); }
}  // namespace

Tensor neg(const Tensor& x) { return Unary(OpId::kNeg, x); }
Tensor abs(const Tensor& x) { return Unary(OpId::kAbs, x); }
Tensor sign(const Tensor& x) { return Unary(OpId::kSign, x); }
Tensor exp(const Tensor& x) { return Unary(OpId::kExp, x); }
Tensor log(const Tensor& x) { return Unary(OpId::kLog, x); }
Tensor sqrt(const Tensor& x) { return Unary(OpId::kSqrt, x); }
Tensor rsqrt(const Tensor& x) { return Unary(OpId::kRsqrt, x); }
Tensor reciprocal(const Tensor& x) { return Unary(OpId::kReciprocal, x); }
Tensor tanh(const Tensor& x) { return Unary(OpId::kTanh, x); }
Tensor erf(const Tensor& x) { return Unary(OpId::kErf, x); }
Tensor sigmoid(const Tensor& x) { return Unary(OpId::kSigmoid, x); }
Tensor relu(const Tensor& x) { return Unary(OpId::kRelu, x); }
Tensor gelu(const Tensor& x, const std::string& approximate) {
  SJ_REQUIRE(approximate == "none" || approximate == "tanh",
             "gelu: approximate must be 'none' or 'tanh', got '", approximate, "'");
  return Unary(approximate == "tanh" ? OpId::kGeluTanh : OpId::kGelu, x);
}
Tensor silu(const Tensor& x) { return Unary(OpId::kSilu, x); }
Tensor sin(const Tensor& x) { return Unary(OpId::kSin, x); }
Tensor cos(const Tensor& x) { return Unary(OpId::kCos, x); }
Tensor cast(const Tensor& x, DType dtype) {
  return Dispatch(OpId::kCast, {x}, {{AttrKey::kDTypeAttr, dtype}});
}

Tensor add(const Tensor& a, const Tensor& b) { return Binary(OpId::kAdd, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return Binary(OpId::kSub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return Binary(OpId::kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return Binary(OpId::kDiv, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return Binary(OpId::kPow, a, b); }
Tensor pow(const Tensor& a, double exponent) {
  return Binary(OpId::kPow, a, wrap_scalar(exponent, a));
}
Tensor maximum(const Tensor& a, const Tensor& b) { return Binary(OpId::kMaximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return Binary(OpId::kMinimum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return Binary(OpId::kEq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return Binary(OpId::kNe, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return Binary(OpId::kLt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return Binary(OpId::kLe, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return Binary(OpId::kGt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return Binary(OpId::kGe, a, b); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return Dispatch(OpId::kWhere, {cond, a, b});
}

Tensor wrap_scalar(double value, const Tensor& like) {
  DType t = like.dtype();
  if (!ir::IsFloating(t)) {
    t = (value == static_cast<double>(static_cast<int64_t>(value))) ? DType::kI64
                                                                    : DType::kF32;
  }
  return scalar_tensor(value, {.dtype = t, .device = like.device()});
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double b) { return add(a, wrap_scalar(b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, wrap_scalar(b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, wrap_scalar(b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, wrap_scalar(b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(wrap_scalar(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(wrap_scalar(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(wrap_scalar(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(wrap_scalar(a, b), b); }

namespace {
Tensor Reduce(OpId op, const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return Dispatch(op, {x}, {{AttrKey::kDims, std::move(dims)}, {AttrKey::kKeepdim, keepdim}});
}
}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return Reduce(OpId::kSum, x, std::move(dims), keepdim);
}
Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return Reduce(OpId::kMean, x, std::move(dims), keepdim);
}
Tensor amax(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return Reduce(OpId::kAmax, x, std::move(dims), keepdim);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return Dispatch(OpId::kArgmax, {x}, {{AttrKey::kDim, dim}, {AttrKey::kKeepdim, keepdim}});
}
Tensor var(const Tensor& x, std::vector<int64_t> dims, int64_t correction, bool keepdim) {
  return Dispatch(OpId::kVar, {x},
                  {{AttrKey::kDims, std::move(dims)},
                   {AttrKey::kCorrection, correction},
                   {AttrKey::kKeepdim, keepdim}});
}

Tensor sum_to_size(const Tensor& x, ShapeRef shape) {
  if (ShapeRef(x.shape()) == shape) return x;
  const int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  SJ_REQUIRE(lead >= 0, "sum_to_size: cannot sum ", ir::ShapeToString(x.shape()),
             " to the larger shape ", ir::ShapeToString(shape));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < lead) {
      dims.push_back(i);
    } else if (shape[i - lead] == 1 && x.shape()[i] != 1) {
      dims.push_back(i);
    } else {
      SJ_REQUIRE(shape[i - lead] == x.shape()[i], "sum_to_size: ",
                 ir::ShapeToString(x.shape()), " does not broadcast from ",
                 ir::ShapeToString(shape));
    }
  }
  Tensor s = dims.empty() ? x : sum(x, dims, /*keepdim=*/true);
  return s.dim() == static_cast<int64_t>(shape.size()) ? s : s.reshape(shape);
}

Tensor softmax(const Tensor& x, int64_t dim) {
  return Dispatch(OpId::kSoftmax, {x}, {{AttrKey::kDim, dim}});
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return Dispatch(OpId::kLogSoftmax, {x}, {{AttrKey::kDim, dim}});
}
namespace {
// The normalizations' check: `normalized_shape` is x's last k >= 1 dims.
// Returns k.
int64_t NormalizedNdim(const char* op, const Tensor& x,
                       ShapeRef normalized_shape) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  SJ_REQUIRE(k >= 1 && k <= x.dim() &&
                 ShapeRef(x.shape()).subspan(x.dim() - k) == normalized_shape,
             op, ": normalized_shape ", ir::ShapeToString(normalized_shape),
             " must match the trailing dims of input ",
             ir::ShapeToString(x.shape()));
  return k;
}
}  // namespace

Tensor layer_norm(const Tensor& x, ShapeRef normalized_shape,
                  const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t k = NormalizedNdim("layer_norm", x, normalized_shape);
  SJ_REQUIRE(weight.defined() || !bias.defined(),
             "layer_norm: a bias without a weight is not supported");
  std::vector<Tensor> in = {x};
  if (weight.defined()) in.push_back(weight);
  if (bias.defined()) in.push_back(bias);
  return Dispatch(OpId::kLayerNorm, in,
                  {{AttrKey::kNormalizedNdim, k}, {AttrKey::kEps, eps}});
}

Tensor rms_norm(const Tensor& x, ShapeRef normalized_shape,
                const Tensor& weight, std::optional<double> eps) {
  SJ_REQUIRE(x.defined(), "rms_norm: the input is an undefined tensor");
  const int64_t k = NormalizedNdim("rms_norm", x, normalized_shape);
  SJ_REQUIRE(ir::IsFloating(x.dtype()),
             "rms_norm: expected a floating-point input, got ",
             ir::DTypeName(x.dtype()));
  SJ_REQUIRE(!weight.defined() || ShapeRef(weight.shape()) == normalized_shape,
             "rms_norm: weight of shape ", ir::ShapeToString(weight.shape()),
             ", expected normalized_shape ",
             ir::ShapeToString(normalized_shape));
  // PyTorch's opmath type: f32 for the 16-bit types.
  const DType compute = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  const double e = eps.value_or(compute == DType::kF64
                                    ? std::numeric_limits<double>::epsilon()
                                    : std::numeric_limits<float>::epsilon());
  SJ_REQUIRE(e >= 0, "rms_norm: eps must not be negative, got ", e);
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  const Tensor up = x.to(compute);
  Tensor y =
      (up * rsqrt(mean(up * up, dims, /*keepdim=*/true) + e)).to(x.dtype());
  return weight.defined() ? y * weight : y;
}

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  return Dispatch(OpId::kMatmul, {a, b},
                  {{AttrKey::kTransposeA, transpose_a}, {AttrKey::kTransposeB, transpose_b}});
}

namespace {

std::vector<int64_t> Ints(const std::array<int64_t, 2>& v) {
  return {v[0], v[1]};
}

ir::Attrs ConvAttrs(const Conv2dOptions& o) {
  return {{AttrKey::kStride, Ints(o.stride)},
          {AttrKey::kPadding, Ints(o.padding)},
          {AttrKey::kDilation, Ints(o.dilation)},
          {AttrKey::kGroups, o.groups}};
}

ir::Attrs PoolAttrs(const Pool2dOptions& o, bool max) {
  ir::Attrs attrs{{AttrKey::kKernelSize, Ints(o.kernel_size)},
                  {AttrKey::kStride, Ints(o.stride.value_or(o.kernel_size))},
                  {AttrKey::kPadding, Ints(o.padding)},
                  {AttrKey::kCeilMode, o.ceil_mode}};
  if (max) {
    attrs.Set(AttrKey::kDilation, Ints(o.dilation));
  } else {
    SJ_REQUIRE(o.dilation == (std::array<int64_t, 2>{1, 1}),
               "avg_pool2d: dilation must be [1, 1], got [", o.dilation[0],
               ", ", o.dilation[1], "]");
    attrs.Set(AttrKey::kCountIncludePad, o.count_include_pad);
  }
  return attrs;
}

std::vector<int64_t> ShapeVector(ShapeRef s) { return {s.begin(), s.end()}; }

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options) {
  if (bias.defined())
    return Dispatch(OpId::kConv2d, {input, weight, bias}, ConvAttrs(options));
  return Dispatch(OpId::kConv2d, {input, weight}, ConvAttrs(options));
}

Tensor conv2d_backward_input(const Tensor& grad, const Tensor& weight,
                             ShapeRef input_shape,
                             const Conv2dOptions& options) {
  ir::Attrs attrs = ConvAttrs(options);
  attrs.Set(AttrKey::kInputShape, ShapeVector(input_shape));
  return Dispatch(OpId::kConv2dBackwardInput, {grad, weight}, attrs);
}

Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& input,
                              ShapeRef weight_shape,
                              const Conv2dOptions& options) {
  ir::Attrs attrs = ConvAttrs(options);
  attrs.Set(AttrKey::kShape, ShapeVector(weight_shape));
  return Dispatch(OpId::kConv2dBackwardWeight, {grad, input}, attrs);
}

Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options) {
  return Dispatch(OpId::kMaxPool2d, {input}, PoolAttrs(options, true));
}

Tensor max_pool2d_backward(const Tensor& grad, const Tensor& input,
                           const Pool2dOptions& options) {
  return Dispatch(OpId::kMaxPool2dBackward, {grad, input},
                  PoolAttrs(options, true));
}

Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options) {
  return Dispatch(OpId::kAvgPool2d, {input}, PoolAttrs(options, false));
}

Tensor avg_pool2d_backward(const Tensor& grad, ShapeRef input_shape,
                           const Pool2dOptions& options) {
  ir::Attrs attrs = PoolAttrs(options, false);
  attrs.Set(AttrKey::kInputShape, ShapeVector(input_shape));
  return Dispatch(OpId::kAvgPool2dBackward, {grad}, attrs);
}

Tensor adaptive_avg_pool2d(const Tensor& input,
                           std::array<int64_t, 2> output_size) {
  SJ_REQUIRE(input.dim() == 4,
             "adaptive_avg_pool2d: expected [N, C, H, W], "
             "got ",
             ir::ShapeToString(input.shape()));
  SJ_REQUIRE(output_size[0] >= 1 && output_size[1] >= 1,
             "adaptive_avg_pool2d: output_size must be >= 1, got [",
             output_size[0], ", ", output_size[1], "]");
  const int64_t h = input.size(2), w = input.size(3);
  if (output_size[0] == 1 && output_size[1] == 1)
    return mean(input, {2, 3}, /*keepdim=*/true);
  SJ_REQUIRE(h % output_size[0] == 0 && w % output_size[1] == 0,
             "adaptive_avg_pool2d: output_size [", output_size[0], ", ",
             output_size[1], "] needs windows of unequal sizes over [", h, ", ",
             w,
             "]; only a global pool ([1, 1]) or sizes that divide "
             "the input are supported");
  const std::array<int64_t, 2> k{h / output_size[0], w / output_size[1]};
  return avg_pool2d(input, {.kernel_size = k, .stride = k});
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  return Dispatch(OpId::kEmbedding, {weight, indices});
}
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights) {
  return Dispatch(OpId::kEmbeddingBackward, {grad, indices},
                  {{AttrKey::kNumWeights, num_weights}});
}
Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype) {
  SJ_REQUIRE(num_classes > 0, "one_hot: num_classes must be positive, got ", num_classes);
  return Dispatch(OpId::kOneHot, {indices},
                  {{AttrKey::kNumClasses, num_classes}, {AttrKey::kDTypeAttr, dtype}});
}
Tensor slice_backward(const Tensor& grad, ShapeRef input_shape, int64_t dim, int64_t start,
                      int64_t end, int64_t step) {
  return Dispatch(OpId::kSliceBackward, {grad},
                  {{AttrKey::kInputShape, std::vector<int64_t>(input_shape.begin(),
                                                               input_shape.end())},
                   {AttrKey::kDim, dim}, {AttrKey::kStart, start},
                   {AttrKey::kEnd, end}, {AttrKey::kStep, step}});
}

namespace {

// keep[i, j] = (j - i) <= diagonal for tril, >= for triu, over the last two
// dims of x, on x's device.
Tensor TriangleKeep(const Tensor& x, int64_t diagonal, bool lower,
                    const char* what) {
  SJ_REQUIRE(x.dim() >= 2, what, ": expected a tensor of rank >= 2, got ",
             ir::ShapeToString(x.shape()));
  const int64_t rows = x.shape()[x.dim() - 2], cols = x.shape()[x.dim() - 1];
  const TensorOptions opts{.dtype = DType::kI64, .device = x.device()};
  // row + diagonal against column.
  const Tensor r = arange(static_cast<double>(diagonal),
                          static_cast<double>(rows + diagonal), 1.0, opts)
                       .reshape({rows, 1});
  const Tensor c =
      arange(0.0, static_cast<double>(cols), 1.0, opts).reshape({1, cols});
  return lower ? ge(r, c) : ge(c, r);
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  return where(TriangleKeep(x, diagonal, true, "tril"), x,
               full({}, 0.0, {.dtype = x.dtype(), .device = x.device()}));
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  return where(TriangleKeep(x, diagonal, false, "triu"), x,
               full({}, 0.0, {.dtype = x.dtype(), .device = x.device()}));
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  SJ_REQUIRE(mask.dtype() == DType::kBool,
             "masked_fill: mask must be bool, got ",
             ir::DTypeName(mask.dtype()));
  Tensor out = where(
      mask, full({}, value, {.dtype = x.dtype(), .device = x.device()}), x);
  SJ_REQUIRE(out.shape() == x.shape(), "masked_fill: mask of shape ",
             ir::ShapeToString(mask.shape()),
             " does not broadcast to the input's ",
             ir::ShapeToString(x.shape()));
  return out;
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  SJ_REQUIRE(!tensors.empty(), "cat: expected at least one tensor, got none");
  return Dispatch(OpId::kCat, tensors, {{AttrKey::kDim, dim}});
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  SJ_REQUIRE(!tensors.empty(), "stack: expected at least one tensor, got none");
  const int64_t rank = tensors[0].dim() + 1;
  SJ_REQUIRE(dim >= -rank && dim < rank, "stack: dim ", dim,
             " is out of range for tensors of rank ", rank - 1);
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    SJ_REQUIRE(tensors[i].shape() == tensors[0].shape(), "stack: tensor ", i,
               " has shape ", ir::ShapeToString(tensors[i].shape()),
               ", tensor 0 has ", ir::ShapeToString(tensors[0].shape()),
               "; stack needs one shape");
    parts.push_back(tensors[i].unsqueeze(ir::WrapDim(dim, rank)));
  }
  return cat(parts, dim);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  SJ_REQUIRE(x.dim() > 0,
             "split: expected a tensor with a dim, got a 0-d tensor");
  SJ_REQUIRE(dim >= -x.dim() && dim < x.dim(), "split: dim ", dim,
             " is out of range for rank ", x.dim());
  SJ_REQUIRE(split_size > 0, "split: split_size must be positive, got ",
             split_size);
  const int64_t d = ir::WrapDim(dim, x.dim());
  const int64_t n = x.shape()[d];
  std::vector<Tensor> parts;
  for (int64_t start = 0; start < n; start += split_size)
    parts.push_back(x.slice(d, start, std::min(n, start + split_size)));
  if (parts.empty()) parts.push_back(x);  // a zero-size dim: one empty part
  return parts;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  SJ_REQUIRE(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  SJ_REQUIRE(x.dim() > 0,
             "chunk: expected a tensor with a dim, got a 0-d tensor");
  SJ_REQUIRE(dim >= -x.dim() && dim < x.dim(), "chunk: dim ", dim,
             " is out of range for rank ", x.dim());
  const int64_t n = x.shape()[ir::WrapDim(dim, x.dim())];
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     const std::string& reduction, double label_smoothing) {
  SJ_REQUIRE(label_smoothing >= 0.0 && label_smoothing <= 1.0,
             "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  SJ_REQUIRE(reduction == "mean" || reduction == "sum" || reduction == "none",
             "cross_entropy: reduction must be 'mean', 'sum' or 'none', got '",
             reduction, "'");
  return Dispatch(OpId::kCrossEntropy, {logits, targets},
                  {{AttrKey::kReduction, reduction},
                   {AttrKey::kLabelSmoothing, label_smoothing}});
}
TopK topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  const ir::Attrs attrs = {
      {AttrKey::kK, k}, {AttrKey::kDim, dim}, {AttrKey::kLargest, largest}};
  ir::Attrs index_attrs = attrs;
  index_attrs.Set(AttrKey::kIndices, true);
  return {Dispatch(OpId::kTopk, {x}, attrs),
          Dispatch(OpId::kTopk, {x}, index_attrs)};
}

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  SJ_REQUIRE(reduction == "mean" || reduction == "sum" || reduction == "none",
             "mse_loss: reduction must be 'mean', 'sum' or 'none', got '", reduction, "'");
  return Dispatch(OpId::kMseLoss, {input, target}, {{AttrKey::kReduction, reduction}});
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  SJ_REQUIRE(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  Generator& g = gen ? *gen : default_generator();
  const uint64_t offset = g.Reserve(static_cast<uint64_t>(x.numel()));
  return Dispatch(OpId::kDropout, {x},
                  {{AttrKey::kP, p},
                   {AttrKey::kSeed, static_cast<int64_t>(g.seed())},
                   {AttrKey::kOffset, static_cast<int64_t>(offset)}});
}

Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement,
                   Generator* gen) {
  SJ_REQUIRE(weights.defined(), "multinomial: weights is an undefined tensor");
  SJ_REQUIRE(weights.dim() >= 1 && weights.shape().back() > 0,
             "multinomial: weights need a non-empty last dim of categories, "
             "got shape ",
             ir::ShapeToString(weights.shape()));
  Generator& g = gen ? *gen : default_generator();
  const int64_t n = weights.shape().back();
  const int64_t rows = weights.numel() / n;
  // One word per draw with replacement; one per category without (each
  // category's exponential race time).
  const uint64_t words =
      static_cast<uint64_t>(rows) *
      static_cast<uint64_t>(replacement ? std::max<int64_t>(num_samples, 0)
                                        : n);
  return Dispatch(OpId::kMultinomial, {weights},
                  {{AttrKey::kNumSamples, num_samples},
                   {AttrKey::kReplacement, replacement},
                   {AttrKey::kSeed, static_cast<int64_t>(g.seed())},
                   {AttrKey::kOffset, static_cast<int64_t>(g.Reserve(words))}});
}

namespace {
Tensor Random(OpId op, ShapeRef shape, TensorOptions options, Generator* gen,
              ir::Attrs attrs) {
  Generator& g = gen ? *gen : default_generator();
  const absl::StatusOr<int64_t> numel = ir::CheckedNumElements(shape);
  SJ_REQUIRE(numel.ok(), ir::OpName(op), ": ", numel.status().message());
  // randn uses two uniforms per value.
  const uint64_t n =
      static_cast<uint64_t>(*numel) * (op == OpId::kRandn ? 2 : 1);
  attrs.Set(AttrKey::kShape, std::vector<int64_t>(shape.begin(), shape.end()));
  attrs.Set(AttrKey::kDTypeAttr, options.dtype);
  attrs.Set(AttrKey::kSeed, static_cast<int64_t>(g.seed()));
  attrs.Set(AttrKey::kOffset, static_cast<int64_t>(g.Reserve(n)));
  runtime::FactoryDeviceGuard device(options.device);
  Tensor t = Dispatch(op, {}, attrs);
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}
}  // namespace

Tensor rand(ShapeRef shape, TensorOptions options, Generator* gen) {
  SJ_REQUIRE(ir::IsFloating(options.dtype), "rand: dtype must be floating point, got ",
             ir::DTypeName(options.dtype));
  return Random(OpId::kRand, shape, options, gen, {});
}
Tensor randn(ShapeRef shape, TensorOptions options, Generator* gen) {
  SJ_REQUIRE(ir::IsFloating(options.dtype), "randn: dtype must be floating point, got ",
             ir::DTypeName(options.dtype));
  return Random(OpId::kRandn, shape, options, gen, {});
}
Tensor randint(int64_t low, int64_t high, ShapeRef shape, TensorOptions options,
               Generator* gen) {
  SJ_REQUIRE(low < high, "randint: need low < high, got [", low, ", ", high, ")");
  return Random(OpId::kRandint, shape, options, gen,
                {{AttrKey::kLow, low}, {AttrKey::kHigh, high}});
}

}  // namespace stepjit
