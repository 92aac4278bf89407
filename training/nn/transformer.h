// Transformer building blocks written with ordinary ops (so that a compiled
// step traces and fuses them): multi-head self-attention with a fused QKV
// projection, and a pre-LN transformer block. Parameter names follow
// PyTorch's nn.MultiheadAttention (in_proj_weight, in_proj_bias, out_proj).
#ifndef STEPJIT_TRAINING_NN_TRANSFORMER_H_
#define STEPJIT_TRAINING_NN_TRANSFORMER_H_

#include <cstdint>
#include <vector>

#include "training/nn/layers.h"
#include "training/nn/module.h"

namespace stepjit::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;  // on the attention weights, in training
  bool bias = true;      // in_proj_bias and out_proj.bias
  bool causal = false;   // each position attends to itself and earlier ones
};

// Self-attention over x: [..., T, embed_dim] (any leading dims, or none).
// in_proj_weight [3E, E] ~ xavier_uniform and the biases start at 0, as in
// PyTorch; heads split E evenly.
class MultiheadAttentionImpl : public Module {
 public:
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads,
                         MultiheadAttentionOptions options = {});
  Tensor forward(const Tensor& x) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

  Tensor in_proj_weight;  // [3E, E]: the q, k and v projections stacked
  Tensor in_proj_bias;    // [3E], undefined without bias
  Linear out_proj{nullptr};

 protected:
  void OnParameterReplaced(const std::string& name,
                           const Tensor& tensor) override;

 private:
  Tensor Attend(const Tensor& x);

  int64_t embed_dim_, num_heads_;
  MultiheadAttentionOptions options_;
};

struct TransformerBlockOptions {
  int64_t mlp_ratio = 4;  // the MLP's hidden width is mlp_ratio * d_model
  double dropout = 0.0;   // on attention weights and both residual branches
  bool causal = true;
  double eps = 1e-5;  // LayerNorm
};

// Pre-LN: x + drop(attn(ln1(x))), then + drop(fc2(gelu(fc1(ln2(x))))).
class TransformerBlockImpl : public Module {
 public:
  TransformerBlockImpl(int64_t d_model, int64_t num_heads,
                       TransformerBlockOptions options = {});
  Tensor forward(const Tensor& x) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

  LayerNorm ln1{nullptr}, ln2{nullptr};
  ModuleHolder<MultiheadAttentionImpl> attn{nullptr};
  Linear fc1{nullptr}, fc2{nullptr};

 private:
  TransformerBlockOptions options_;
};

using MultiheadAttention = ModuleHolder<MultiheadAttentionImpl>;
using TransformerBlock = ModuleHolder<TransformerBlockImpl>;

struct GPTOptions {
  int64_t vocab = 0;
  int64_t context = 0;  // the longest sequence (learned position embeddings)
  int64_t d_model = 128;
  int64_t heads = 4;
  int64_t layers = 4;
  double dropout = 0.0;
  bool tie_weights = false;  // the head's weight is the token embedding
};

// A GPT-style language model: token and learned position embeddings,
// `layers` causal TransformerBlocks, a final LayerNorm and a vocabulary
// head (without bias when tied). tokens [B, T] (T <= context) -> logits
// [B, T, vocab].
class GPTImpl : public Module {
 public:
  explicit GPTImpl(GPTOptions options);
  Tensor forward(const Tensor& tokens) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

  Embedding tok{nullptr}, pos{nullptr};
  std::vector<TransformerBlock> blocks;
  LayerNorm ln_f{nullptr};
  Linear head{nullptr};

 private:
  GPTOptions options_;
  Tensor positions_;  // 0..T-1 on the last input's device
};

using GPT = ModuleHolder<GPTImpl>;

}  // namespace stepjit::nn

#endif  // STEPJIT_TRAINING_NN_TRANSFORMER_H_
