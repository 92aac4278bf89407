// scaled_dot_product_attention from ordinary ops.
#include <cmath>
#include <limits>

#include "training/nn/functional.h"

namespace stepjit::nn::functional {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k,
                                    const Tensor& v, bool causal,
                                    double dropout_p, const Tensor& attn_mask,
                                    double scale, Generator* gen) {
  SJ_REQUIRE(
      q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(),
      "scaled_dot_product_attention: q, k and v must have one rank >= 2, got ",
      ir::ShapeToString(q.shape()), ", ", ir::ShapeToString(k.shape()), " and ",
      ir::ShapeToString(v.shape()));
  const int64_t r = q.dim();
  const int64_t l = q.shape()[r - 2], s = k.shape()[r - 2],
                e = q.shape()[r - 1];
  SJ_REQUIRE(k.shape()[r - 1] == e && v.shape()[r - 2] == s,
             "scaled_dot_product_attention: k ", ir::ShapeToString(k.shape()),
             " must be [..., S, ", e, "] and v ", ir::ShapeToString(v.shape()),
             " [..., S, Ev] for q ", ir::ShapeToString(q.shape()));
  SJ_REQUIRE(dropout_p >= 0.0 && dropout_p < 1.0,
             "scaled_dot_product_attention: dropout_p must be in [0, 1), got ",
             dropout_p);
  SJ_REQUIRE(scale >= 0.0,
             "scaled_dot_product_attention: scale must be positive, got ",
             scale);
  const double sc =
      scale > 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(e));
  Tensor att = matmul(q, k, false, /*transpose_b=*/true) * sc;
  const double hidden = -std::numeric_limits<double>::infinity();
  if (causal) {
    // Query i sees keys j <= i (aligned at the start, as PyTorch does).
    const TensorOptions idx{.dtype = DType::kI64, .device = q.device()};
    const Tensor i =
        arange(0.0, static_cast<double>(l), 1.0, idx).reshape({l, 1});
    const Tensor j =
        arange(0.0, static_cast<double>(s), 1.0, idx).reshape({1, s});
    att = masked_fill(att, gt(j, i), hidden);
  }
  if (attn_mask.defined()) {
    if (attn_mask.dtype() == DType::kBool) {
      att =
          where(attn_mask, att,
                full({}, hidden, {.dtype = att.dtype(), .device = q.device()}));
    } else {
      att = att + attn_mask;
    }
  }
  Tensor p = ::stepjit::softmax(att, -1);
  if (dropout_p > 0.0)
    p = ::stepjit::dropout(p, dropout_p, /*training=*/true, gen);
  return matmul(p, v);
}

}  // namespace stepjit::nn::functional
