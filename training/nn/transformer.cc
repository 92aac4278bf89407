// MultiheadAttention and TransformerBlock: construction and forward.
#include "training/nn/transformer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops.h"
#include "training/nn/functional.h"

namespace stepjit::nn {

MultiheadAttentionImpl::MultiheadAttentionImpl(
    int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options)
    : embed_dim_(embed_dim), num_heads_(num_heads), options_(options) {
  SJ_REQUIRE(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
             "MultiheadAttention: embed_dim must be a positive multiple of "
             "num_heads, got ",
             embed_dim, " and ", num_heads);
  SJ_REQUIRE(options.dropout >= 0.0 && options.dropout < 1.0,
             "MultiheadAttention: dropout must be in [0, 1), got ",
             options.dropout);
  Tensor w;
  {
    NoGradGuard no_grad;
    // xavier_uniform over [3E, E]: bound sqrt(6 / (fan_in + fan_out)).
    const double bound = std::sqrt(6.0 / static_cast<double>(4 * embed_dim));
    w = rand({3 * embed_dim, embed_dim}) * (2.0 * bound) - bound;
  }
  in_proj_weight = register_parameter("in_proj_weight", w);
  if (options.bias)
    in_proj_bias = register_parameter("in_proj_bias", zeros({3 * embed_dim}));
  out_proj =
      register_module("out_proj", Linear(embed_dim, embed_dim, options.bias));
  if (options.bias) {
    NoGradGuard no_grad;
    out_proj->bias.fill_(0.0);
  }
}

void MultiheadAttentionImpl::OnParameterReplaced(const std::string& name,
                                                 const Tensor& tensor) {
  if (name == "in_proj_weight") in_proj_weight = tensor;
  if (name == "in_proj_bias") in_proj_bias = tensor;
}

Tensor MultiheadAttentionImpl::forward(const Tensor& x) {
  SJ_REQUIRE(x.dim() >= 2 && x.shape().back() == embed_dim_,
             "MultiheadAttention: expected input [..., T, ", embed_dim_,
             "], got ", ir::ShapeToString(x.shape()));
  return RecordedForward(x, [&] { return Attend(x); });
}

Tensor MultiheadAttentionImpl::Attend(const Tensor& x) {
  const int64_t e = embed_dim_, h = num_heads_, dh = e / h;
  const int64_t t = x.shape()[x.dim() - 2], b = x.numel() / (t * e);
  // One GEMM for q, k and v (bias in its epilogue), then per-head views.
  const Tensor qkv =
      functional::linear(x.reshape({b * t, e}), in_proj_weight, in_proj_bias);
  auto heads = [&](int64_t part) {  // [B, H, T, Dh]
    return qkv.slice(1, part * e, (part + 1) * e)
        .reshape({b, t, h, dh})
        .permute({0, 2, 1, 3});
  };
  const Tensor y = functional::scaled_dot_product_attention(
      heads(0), heads(1), heads(2), options_.causal,
      is_training() ? options_.dropout : 0.0);
  return out_proj(y.permute({0, 2, 1, 3}).reshape({b * t, e}))
      .reshape(x.shape());
}

TransformerBlockImpl::TransformerBlockImpl(int64_t d_model, int64_t num_heads,
                                           TransformerBlockOptions options)
    : options_(options) {
  SJ_REQUIRE(options.mlp_ratio > 0,
             "TransformerBlock: mlp_ratio must be positive, got ",
             options.mlp_ratio);
  SJ_REQUIRE(options.dropout >= 0.0 && options.dropout < 1.0,
             "TransformerBlock: dropout must be in [0, 1), got ",
             options.dropout);
  ln1 = register_module("ln1", LayerNorm(d_model, options.eps));
  attn = register_module(
      "attn",
      MultiheadAttention(d_model, num_heads,
                         MultiheadAttentionOptions{.dropout = options.dropout,
                                                   .causal = options.causal}));
  ln2 = register_module("ln2", LayerNorm(d_model, options.eps));
  fc1 = register_module("fc1", Linear(d_model, options.mlp_ratio * d_model));
  fc2 = register_module("fc2", Linear(options.mlp_ratio * d_model, d_model));
}

Tensor TransformerBlockImpl::forward(const Tensor& x) {
  return RecordedForward(x, [&] {
    const double p = is_training() ? options_.dropout : 0.0;
    Tensor r = x + dropout(attn(ln1(x)), p, p > 0.0);
    return r + dropout(fc2(gelu(fc1(ln2(r)))), p, p > 0.0);
  });
}

GPTImpl::GPTImpl(GPTOptions options) : options_(options) {
  SJ_REQUIRE(options.vocab > 0 && options.context > 0 && options.layers > 0,
             "GPT: vocab, context and layers must be positive, got ",
             options.vocab, ", ", options.context, " and ", options.layers);
  tok = register_module("tok", Embedding(options.vocab, options.d_model));
  pos = register_module("pos", Embedding(options.context, options.d_model));
  for (int64_t l = 0; l < options.layers; ++l) {
    blocks.push_back(register_module(
        absl::StrCat("h", l),
        TransformerBlock(options.d_model, options.heads,
                         TransformerBlockOptions{.dropout = options.dropout})));
  }
  ln_f = register_module("ln_f", LayerNorm(options.d_model));
  head = register_module(
      "head", Linear(options.d_model, options.vocab, !options.tie_weights));
  if (options.tie_weights) head->replace_parameter("weight", tok->weight);
}

Tensor GPTImpl::forward(const Tensor& tokens) {
  SJ_REQUIRE(tokens.dim() == 2 && tokens.size(1) <= options_.context,
             "GPT: expected tokens [B, T] with T <= context ", options_.context,
             ", got ", ir::ShapeToString(tokens.shape()));
  const int64_t t = tokens.size(1);
  if (!positions_.defined() || positions_.size(0) != t ||
      positions_.device() != tokens.device())
    positions_ = arange(0.0, static_cast<double>(t), 1.0,
                        {.dtype = DType::kI64, .device = tokens.device()});
  // (positions_ is rebuilt above, outside the recorded routine, which
  // reads it.)
  return RecordedForward(tokens, [&] {
    Tensor x = tok(tokens) + pos(positions_);
    for (TransformerBlock& b : blocks) x = b(x);
    return head(ln_f(x));
  });
}

bool MultiheadAttentionImpl::DescribeForward(
    std::vector<uint64_t>& key, runtime::RoutineTensors& tensors) const {
  if (!IsExactly<MultiheadAttentionImpl>(*this) || !in_proj_weight.defined())
    return false;
  key.insert(key.end(), {static_cast<uint64_t>(ModuleTag::kMultiheadAttention),
                         static_cast<uint64_t>(embed_dim_),
                         static_cast<uint64_t>(num_heads_),
                         KeyBits(options_.dropout), uint64_t{options_.bias},
                         uint64_t{options_.causal}, uint64_t{is_training()}});
  tensors.Add(in_proj_weight);
  DescribeOptional(in_proj_bias, key, tensors);
  return DescribeModule(out_proj.ptr().get(), key, tensors);
}

bool TransformerBlockImpl::DescribeForward(
    std::vector<uint64_t>& key, runtime::RoutineTensors& tensors) const {
  if (!IsExactly<TransformerBlockImpl>(*this)) return false;
  key.insert(key.end(), {static_cast<uint64_t>(ModuleTag::kTransformerBlock),
                         static_cast<uint64_t>(options_.mlp_ratio),
                         KeyBits(options_.dropout), uint64_t{options_.causal},
                         KeyBits(options_.eps), uint64_t{is_training()}});
  return DescribeModule(ln1.ptr().get(), key, tensors) &&
         DescribeModule(attn.ptr().get(), key, tensors) &&
         DescribeModule(ln2.ptr().get(), key, tensors) &&
         DescribeModule(fc1.ptr().get(), key, tensors) &&
         DescribeModule(fc2.ptr().get(), key, tensors);
}

bool GPTImpl::DescribeForward(std::vector<uint64_t>& key,
                              runtime::RoutineTensors& tensors) const {
  if (!IsExactly<GPTImpl>(*this)) return false;
  key.insert(key.end(),
             {static_cast<uint64_t>(ModuleTag::kGPT),
              static_cast<uint64_t>(options_.vocab),
              static_cast<uint64_t>(options_.context),
              static_cast<uint64_t>(options_.d_model),
              static_cast<uint64_t>(options_.heads),
              static_cast<uint64_t>(options_.layers), KeyBits(options_.dropout),
              uint64_t{options_.tie_weights}, blocks.size()});
  DescribeOptional(positions_, key, tensors);
  if (!DescribeModule(tok.ptr().get(), key, tensors) ||
      !DescribeModule(pos.ptr().get(), key, tensors))
    return false;
  for (const TransformerBlock& b : blocks) {
    if (!DescribeModule(b.ptr().get(), key, tensors)) return false;
  }
  return DescribeModule(ln_f.ptr().get(), key, tensors) &&
         DescribeModule(head.ptr().get(), key, tensors);
}

}  // namespace stepjit::nn
