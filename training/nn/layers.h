// Standard layers (Linear, ReLU, Tanh, Sigmoid, SiLU, GELU, LayerNorm, RMSNorm,
// Dropout, Embedding, Flatten, Sequential) as Impl modules plus their
// libtorch-style holder names.
//
// Initialization matches PyTorch's defaults and draws from the default
// generator, so stepjit::manual_seed makes a model reproducible.
#ifndef STEPJIT_TRAINING_NN_LAYERS_H_
#define STEPJIT_TRAINING_NN_LAYERS_H_

#include <array>
#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "training/nn/module.h"

namespace stepjit::nn {

// y = x W^T + b; W and b ~ U(-1/sqrt(in), 1/sqrt(in)), which is what
// PyTorch's kaiming_uniform(a=sqrt(5)) default reduces to.
class LinearImpl : public Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

 protected:
  void OnParameterReplaced(const std::string& name, const Tensor& tensor) override;

 public:

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  Tensor weight;  // [out, in]
  Tensor bias;    // [out], undefined without bias

 private:
  int64_t in_features_;
  int64_t out_features_;
};

class ReLUImpl : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;
};

class TanhImpl : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;
};

class SigmoidImpl : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;
};

class SiLUImpl : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;
};

class GELUImpl : public Module {
 public:
  // approximate: "none" (exact erf form) or "tanh".
  explicit GELUImpl(std::string approximate = "none");
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

 private:
  std::string approximate_;
};

// Normalizes over the trailing dims; weight starts at 1 and bias at 0.
class LayerNormImpl : public Module {
 public:
  LayerNormImpl(std::vector<int64_t> normalized_shape, double eps = 1e-5,
                bool elementwise_affine = true);
  explicit LayerNormImpl(int64_t normalized_size, double eps = 1e-5,
                         bool elementwise_affine = true)
      : LayerNormImpl(std::vector<int64_t>{normalized_size}, eps,
                      elementwise_affine) {}
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

 protected:
  void OnParameterReplaced(const std::string& name, const Tensor& tensor) override;

 public:

  Tensor weight;  // undefined without elementwise_affine
  Tensor bias;

 private:
  std::vector<int64_t> normalized_shape_;
  double eps_;
};

// RMSNorm as torch.nn.RMSNorm (llama-style models): rms_norm over the
// trailing `normalized_shape` dims, times a learnable `weight` (ones at
// first; none without elementwise_affine). eps nullopt: the machine epsilon
// of the compute type, as PyTorch.
class RMSNormImpl : public Module {
 public:
  explicit RMSNormImpl(std::vector<int64_t> normalized_shape,
                       std::optional<double> eps = std::nullopt,
                       bool elementwise_affine = true);
  explicit RMSNormImpl(int64_t normalized_size,
                       std::optional<double> eps = std::nullopt,
                       bool elementwise_affine = true)
      : RMSNormImpl(std::vector<int64_t>{normalized_size}, eps,
                    elementwise_affine) {}
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

 protected:
  void OnParameterReplaced(const std::string& name,
                           const Tensor& tensor) override;

 public:
  Tensor weight;  // undefined without elementwise_affine

 private:
  std::vector<int64_t> normalized_shape_;
  std::optional<double> eps_;
};

// Identity in eval mode; in training zeroes with probability p and scales the
// rest by 1/(1-p).
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p = 0.5);
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

 private:
  double p_;
};

// A lookup table [num_embeddings, embedding_dim] initialized from N(0, 1).
class EmbeddingImpl : public Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

  Tensor weight;

 protected:
  void OnParameterReplaced(const std::string& name, const Tensor& tensor) override;
};

class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};

// Convolution over [N, C, H, W] (PyTorch's nn.Conv2d): weight [out, in /
// groups, kh, kw] and bias [out] ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = in / groups * kh * kw (kaiming_uniform(a=sqrt(5)), as PyTorch).
struct Conv2dModuleOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};
class Conv2dImpl : public Module {
 public:
  Conv2dImpl(int64_t in_channels, int64_t out_channels,
             std::array<int64_t, 2> kernel_size,
             Conv2dModuleOptions options = {});
  // A square kernel.
  Conv2dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
             Conv2dModuleOptions options = {})
      : Conv2dImpl(in_channels, out_channels, {kernel_size, kernel_size},
                   options) {}
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

  Tensor weight;  // [out, in / groups, kh, kw]
  Tensor bias;    // [out], undefined without bias

 protected:
  void OnParameterReplaced(const std::string& name,
                           const Tensor& tensor) override;

 private:
  Conv2dOptions conv_;
};

// Pooling over [N, C, H, W] (PyTorch's nn.MaxPool2d, nn.AvgPool2d and
// nn.AdaptiveAvgPool2d); no parameters. MaxPool2dImpl and AvgPool2dImpl
// are Pool2dImpl of their tag.
template <ModuleTag kTag>
class Pool2dImpl : public Module {
 public:
  explicit Pool2dImpl(Pool2dOptions options) : options_(std::move(options)) {}
  // A square window, its stride the kernel size.
  explicit Pool2dImpl(int64_t kernel_size)
      : Pool2dImpl(Pool2dOptions{.kernel_size = {kernel_size, kernel_size}}) {}
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

 private:
  Pool2dOptions options_;
};
using MaxPool2dImpl = Pool2dImpl<ModuleTag::kMaxPool2d>;
using AvgPool2dImpl = Pool2dImpl<ModuleTag::kAvgPool2d>;
extern template class Pool2dImpl<ModuleTag::kMaxPool2d>;
extern template class Pool2dImpl<ModuleTag::kAvgPool2d>;

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(std::array<int64_t, 2> output_size = {1, 1});
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

 private:
  std::array<int64_t, 2> output_size_;
};

// Batch normalization over the channels of [N, C, H, W] (PyTorch's
// nn.BatchNorm2d): in training, each channel normalized by its batch mean
// and biased variance, and (track_running_stats) running_mean and
// running_var moved toward the batch's mean and unbiased variance by
// `momentum`, num_batches_tracked counted; in eval, the running statistics.
// weight (ones) and bias (zeros) with `affine`. The buffers are in
// state_dict() under PyTorch's names.
struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};
class BatchNorm2dImpl : public Module {
 public:
  explicit BatchNorm2dImpl(int64_t num_features, BatchNormOptions options = {});
  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

  Tensor weight, bias;               // [C], undefined without affine
  Tensor running_mean, running_var;  // [C] f32
  Tensor num_batches_tracked;        // i64 scalar

 protected:
  void OnParameterReplaced(const std::string& name,
                           const Tensor& tensor) override;

 private:
  int64_t num_features_;
  BatchNormOptions options_;
};

// Anything a Sequential accepts: a module pointer or a holder.
template <typename M>
concept AnyModule =
    std::convertible_to<M, std::shared_ptr<Module>> || ModuleHolderType<M>;

// Runs its children in order; children are named "0", "1", ... as in PyTorch.
class SequentialImpl : public Module {
 public:
  SequentialImpl() = default;
  template <AnyModule... Ms>
    requires(sizeof...(Ms) > 0)
  explicit SequentialImpl(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  void push_back(std::shared_ptr<Module> module);
  template <ModuleHolderType H>
  void push_back(const H& holder) {
    push_back(std::shared_ptr<Module>(holder.ptr()));
  }

  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t index) const;
  // The child at `index` as its concrete type; throws Error on a mismatch.
  template <typename M>
  std::shared_ptr<M> at(size_t index) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[index]);
    SJ_REQUIRE(typed != nullptr, "Sequential: child ", index,
               " is not of the requested module type");
    return typed;
  }

  Tensor forward(const Tensor& input) override;
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

using Linear = ModuleHolder<LinearImpl>;
using ReLU = ModuleHolder<ReLUImpl>;
using GELU = ModuleHolder<GELUImpl>;
using Tanh = ModuleHolder<TanhImpl>;
using Sigmoid = ModuleHolder<SigmoidImpl>;
using SiLU = ModuleHolder<SiLUImpl>;
using LayerNorm = ModuleHolder<LayerNormImpl>;
using RMSNorm = ModuleHolder<RMSNormImpl>;
using Dropout = ModuleHolder<DropoutImpl>;
using Embedding = ModuleHolder<EmbeddingImpl>;
using Conv2d = ModuleHolder<Conv2dImpl>;
using BatchNorm2d = ModuleHolder<BatchNorm2dImpl>;
using MaxPool2d = ModuleHolder<MaxPool2dImpl>;
using AvgPool2d = ModuleHolder<AvgPool2dImpl>;
using AdaptiveAvgPool2d = ModuleHolder<AdaptiveAvgPool2dImpl>;
using Flatten = ModuleHolder<FlattenImpl>;

// A holder with the container calls forwarded, so `model.push_back(...)`
// reads like the rest of the holder API.
class Sequential : public ModuleHolder<SequentialImpl> {
 public:
  using ModuleHolder::ModuleHolder;

  template <AnyModule M>
  void push_back(M&& module) const {
    (*this)->push_back(std::forward<M>(module));
  }
  size_t size() const { return (*this)->size(); }
  const std::shared_ptr<Module>& operator[](size_t index) const {
    return (**this)[index];
  }
  template <typename M>
  std::shared_ptr<M> at(size_t index) const {
    return (*this)->template at<M>(index);
  }
};

}  // namespace stepjit::nn

#endif  // STEPJIT_TRAINING_NN_LAYERS_H_
