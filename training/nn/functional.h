// nn::functional: stateless layer functions (torch.nn.functional) over ops.h.
#ifndef STEPJIT_TRAINING_NN_FUNCTIONAL_H_
#define STEPJIT_TRAINING_NN_FUNCTIONAL_H_

#include <string>

#include "ir/status.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace stepjit::nn::functional {

// y = x W^T + b for x: [..., in], weight: [out, in], bias: [out] or undefined.
// Leading dims are folded into one (a view) so any rank reaches the 2-D GEMM,
// and the bias is added before they are unfolded: the GEMM then takes the
// bias (and its gradient) as its epilogue whatever the input's rank.
inline Tensor linear(const Tensor& input, const Tensor& weight,
                     const Tensor& bias = Tensor()) {
  SJ_REQUIRE(weight.dim() == 2 && weight.shape()[1] > 0,
             "linear: weight must be 2-D [out, in] with in > 0, got ",
             ir::ShapeToString(weight.shape()));
  const int64_t in = weight.shape()[1];
  SJ_REQUIRE(input.dim() >= 1 && input.shape().back() == in, "linear: input ",
             ir::ShapeToString(input.shape()), " does not end in in_features ",
             in, " of weight ", ir::ShapeToString(weight.shape()));
  const bool flat = input.dim() == 2;
  const Tensor x = flat ? input : input.reshape({input.numel() / in, in});
  Tensor out = matmul(x, weight, false, /*transpose_b=*/true);
  if (bias.defined()) out = out + bias;
  if (flat) return out;
  Shape out_shape = input.shape();
  out_shape.back() = weight.shape()[0];
  return out.reshape(out_shape);
}

inline Tensor relu(const Tensor& x) { return ::stepjit::relu(x); }

inline Tensor gelu(const Tensor& x, const std::string& approximate = "none") {
  return ::stepjit::gelu(x, approximate);
}

inline Tensor silu(const Tensor& x) { return ::stepjit::silu(x); }

inline Tensor layer_norm(const Tensor& x, ShapeRef normalized_shape,
                         const Tensor& weight = Tensor(),
                         const Tensor& bias = Tensor(), double eps = 1e-5) {
  return ::stepjit::layer_norm(x, normalized_shape, weight, bias, eps);
}
inline Tensor rms_norm(const Tensor& x, ShapeRef normalized_shape,
                       const Tensor& weight = Tensor(),
                       std::optional<double> eps = std::nullopt) {
  return ::stepjit::rms_norm(x, normalized_shape, weight, eps);
}

inline Tensor dropout(const Tensor& x, double p = 0.5, bool training = true,
                      Generator* gen = nullptr) {
  return ::stepjit::dropout(x, p, training, gen);
}

// Argument order follows torch.nn.functional.embedding(input, weight).
inline Tensor embedding(const Tensor& indices, const Tensor& weight) {
  return ::stepjit::embedding(weight, indices);
}

inline Tensor softmax(const Tensor& x, int64_t dim) {
  return ::stepjit::softmax(x, dim);
}

inline Tensor log_softmax(const Tensor& x, int64_t dim) {
  return ::stepjit::log_softmax(x, dim);
}

inline Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                            const std::string& reduction = "mean",
                            double label_smoothing = 0.0) {
  return ::stepjit::cross_entropy(logits, targets, reduction, label_smoothing);
}

// softmax(q k^T * scale + mask) v over the last two dims (q: [..., L, E],
// k: [..., S, E], v: [..., S, Ev]), written with ordinary ops so that a
// compiled step fuses the scale, mask, softmax and dropout into regions.
// `causal` hides keys after each query (position j > i); `attn_mask` is a
// bool mask (true: attend) or an additive float mask broadcasting to
// [..., L, S]. Hidden positions get exactly zero weight. `scale` defaults to
// 1/sqrt(E); dropout (training) draws from `gen` (the default generator if
// null).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k,
                                    const Tensor& v, bool causal = false,
                                    double dropout_p = 0.0,
                                    const Tensor& attn_mask = Tensor(),
                                    double scale = 0.0,
                                    Generator* gen = nullptr);

inline Tensor mse_loss(const Tensor& input, const Tensor& target,
                       const std::string& reduction = "mean") {
  return ::stepjit::mse_loss(input, target, reduction);
}

}  // namespace stepjit::nn::functional

#endif  // STEPJIT_TRAINING_NN_FUNCTIONAL_H_
