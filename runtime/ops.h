// The tensor op API. Every function here goes through runtime::Dispatch.
#ifndef STEPJIT_RUNTIME_OPS_H_
#define STEPJIT_RUNTIME_OPS_H_

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "runtime/generator.h"
#include "runtime/tensor.h"

namespace stepjit {

// Unary.
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate: "none" (erf form) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
// x * sigmoid(x) (SiLU, swish).
Tensor silu(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor cast(const Tensor& x, DType dtype);

// Binary with NumPy broadcasting; a double operand becomes a 0-d tensor that
// does not widen the other operand's dtype (PyTorch's wrapped-number rule).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// A 0-d tensor for `value` that adopts `like`'s dtype category.
Tensor wrap_scalar(double value, const Tensor& like);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// Reductions over `dims` (empty = all dims).
Tensor sum(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor var(const Tensor& x, std::vector<int64_t> dims = {}, int64_t correction = 1,
           bool keepdim = false);
// Sums broadcast dims away so the result has `shape` (autograd's reducer).
Tensor sum_to_size(const Tensor& x, ShapeRef shape);

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Normalizes over the trailing `normalized_shape.size()` dims.
Tensor layer_norm(const Tensor& x, ShapeRef normalized_shape,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);
// Root-mean-square normalization over the trailing `normalized_shape` dims,
// as torch.nn.functional.rms_norm: y = x * rsqrt(mean(x^2) + eps), computed
// in f32 for f16/bf16/f32 inputs (f64 for f64) and returned in x's dtype,
// then times `weight` (when given; the usual promotion applies). eps
// defaults to that compute type's machine epsilon. Written with the ops
// above, so its gradient, fusion (one row region when compiled) and device
// kernels come from theirs.
Tensor rms_norm(const Tensor& x, ShapeRef normalized_shape,
                const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

// a: [..., M, K] (or [..., K, M] when transpose_a), b: [..., K, N] (or [..., N, K]).
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false,
              bool transpose_b = false);

// Convolution and pooling over [N, C, H, W] (PyTorch's torch.nn.functional
// names and defaults; ir/ops.def has the semantics). [height, width] pairs;
// a pool's stride defaults to its kernel size.
struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};
Tensor conv2d(const Tensor& input, const Tensor& weight,
              const Tensor& bias = Tensor(), const Conv2dOptions& options = {});
Tensor conv2d_backward_input(const Tensor& grad, const Tensor& weight,
                             ShapeRef input_shape,
                             const Conv2dOptions& options);
Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& input,
                              ShapeRef weight_shape,
                              const Conv2dOptions& options);
struct Pool2dOptions {
  std::array<int64_t, 2> kernel_size{1, 1};
  std::optional<std::array<int64_t, 2>> stride = std::nullopt;  // kernel_size
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};  // max_pool2d only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
};
Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options);
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& input,
                           const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);
Tensor avg_pool2d_backward(const Tensor& grad, ShapeRef input_shape,
                           const Pool2dOptions& options);
// The mean over windows that give an [N, C, output_size] result: global
// ({1, 1}) as a mean over H and W; otherwise each spatial size must be a
// multiple of its output size (equal windows, avg_pool2d).
Tensor adaptive_avg_pool2d(const Tensor& input,
                           std::array<int64_t, 2> output_size);

Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor embedding_backward(const Tensor& grad, const Tensor& indices,
                          int64_t num_weights);
Tensor one_hot(const Tensor& indices, int64_t num_classes,
               DType dtype = DType::kF32);
Tensor slice_backward(const Tensor& grad, ShapeRef input_shape, int64_t dim,
                      int64_t start, int64_t end, int64_t step);

// Masking by position and by value, written with table ops (arange, ge,
// where) so that the tracer records them and they fuse with their
// neighbours. tril keeps the elements with column <= row + diagonal of the
// last two dims and zeroes the rest; triu keeps column >= row + diagonal.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// x where `mask` (bool, broadcasting to x) is false, `value` where it is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// Joining and splitting along a dim (negative dims count from the end).
// cat: sizes may differ along `dim` only; the result has the widest dtype.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// stack: tensors of one shape joined along a new dim `dim`.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// split: views of `split_size` along `dim` (the last may be shorter).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
// chunk: `chunks` views of ceil(size / chunks) along `dim` (fewer when the
// size runs out first, as in PyTorch).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// The `k` largest elements of `x` along `dim` (the smallest when !largest)
// and their positions, in order: NaN counts as the largest value and ties
// keep the lower index first. The values have x's dtype and a gradient (the
// output gradient scattered back to the positions); the indices are i64.
struct TopK {
  Tensor values;
  Tensor indices;
};
TopK topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

// reduction: "mean", "sum" (or "none" for mse_loss).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     const std::string& reduction = "mean",
                     double label_smoothing = 0.0);
Tensor mse_loss(const Tensor& input, const Tensor& target,
                const std::string& reduction = "mean");

// Zeroes each element with probability p (in training) and scales the rest
// by 1/(1-p); the mask comes from Philox(seed, offset) of `gen`.
Tensor dropout(const Tensor& x, double p, bool training = true,
               Generator* gen = nullptr);

// `num_samples` category indices (i64) drawn from each row of `weights`'
// last dim, whose non-negative finite weights need not sum to 1: with
// replacement each draw is independent; without, a category is drawn at most
// once (needs num_samples <= the categories with positive weight). The draws
// come from Philox(seed, offset) of `gen`, so the tracer records them and a
// compiled step draws anew each call. Throws stepjit::Error on a row with a
// negative, infinite or NaN weight or with no positive weight (the CUDA
// kernel, which cannot throw, writes -1 for such a row).
Tensor multinomial(const Tensor& weights, int64_t num_samples,
                   bool replacement = false, Generator* gen = nullptr);

// Random factories (uniform [0,1), standard normal, integers in [low, high)).
Tensor rand(ShapeRef shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randn(ShapeRef shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, ShapeRef shape,
               TensorOptions options = {.dtype = DType::kI64},
               Generator* gen = nullptr);

}  // namespace stepjit

#endif  // STEPJIT_RUNTIME_OPS_H_
