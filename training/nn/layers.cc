// Standard layers: construction (PyTorch's default init) and forward.
#include "training/nn/layers.h"

#include <cmath>

#include "runtime/autograd/grad_mode.h"
#include "runtime/ops.h"
#include "training/nn/functional.h"

namespace stepjit::nn {
namespace {

// U(-bound, bound) from the default generator, computed as torch's uniform_.
Tensor Uniform(ShapeRef shape, double bound) {
  NoGradGuard no_grad;
  return rand(shape) * (2.0 * bound) - bound;
}

// LayerNorm's and RMSNorm's check of the shape they normalize over.
void CheckNormalizedShape(const char* module, ShapeRef normalized_shape) {
  SJ_REQUIRE(!normalized_shape.empty(), module,
             ": normalized_shape must not be empty");
  for (int64_t d : normalized_shape) {
    SJ_REQUIRE(d > 0, module, ": normalized_shape ",
               ir::ShapeToString(normalized_shape), " has a non-positive dim");
  }
}

void DescribeShape(const std::vector<int64_t>& shape,
                   std::vector<uint64_t>& key) {
  key.push_back(shape.size());
  for (int64_t d : shape) key.push_back(static_cast<uint64_t>(d));
}

// The activations: their tag alone.
template <typename T>
bool DescribeTagOnly(const Module& m, ModuleTag tag,
                     std::vector<uint64_t>& key) {
  if (!IsExactly<T>(m)) return false;
  key.push_back(static_cast<uint64_t>(tag));
  return true;
}

}  // namespace

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool bias)
    : in_features_(in_features), out_features_(out_features) {
  SJ_REQUIRE(in_features > 0 && out_features > 0,
             "Linear: in_features and out_features must be positive, got (",
             in_features, ", ", out_features, ")");
  // kaiming_uniform_(a=sqrt(5)) reduces to bound = 1/sqrt(fan_in); the bias
  // uses the same bound. Weight is drawn first, as in PyTorch.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight =
      register_parameter("weight", Uniform({out_features, in_features}, bound));
  if (bias)
    this->bias = register_parameter("bias", Uniform({out_features}, bound));
}

Conv2dImpl::Conv2dImpl(int64_t in_channels, int64_t out_channels,
                       std::array<int64_t, 2> kernel_size,
                       Conv2dModuleOptions options)
    : conv_{.stride = options.stride,
            .padding = options.padding,
            .dilation = options.dilation,
            .groups = options.groups} {
  SJ_REQUIRE(in_channels > 0 && out_channels > 0 && options.groups > 0,
             "Conv2d: in_channels, out_channels and groups must be positive, "
             "got (",
             in_channels, ", ", out_channels, ", ", options.groups, ")");
  SJ_REQUIRE(
      in_channels % options.groups == 0 && out_channels % options.groups == 0,
      "Conv2d: in_channels ", in_channels, " and out_channels ", out_channels,
      " must both be divisible by groups ", options.groups);
  SJ_REQUIRE(kernel_size[0] > 0 && kernel_size[1] > 0,
             "Conv2d: kernel_size must be positive, got [", kernel_size[0],
             ", ", kernel_size[1], "]");
  const int64_t per_group = in_channels / options.groups;
  const double bound = 1.0 / std::sqrt(static_cast<double>(
                                 per_group * kernel_size[0] * kernel_size[1]));
  weight = register_parameter(
      "weight",
      Uniform({out_channels, per_group, kernel_size[0], kernel_size[1]},
              bound));
  if (options.bias)
    bias = register_parameter("bias", Uniform({out_channels}, bound));
}

Tensor Conv2dImpl::forward(const Tensor& input) {
  return conv2d(input, weight, bias, conv_);
}

void Conv2dImpl::OnParameterReplaced(const std::string& name,
                                     const Tensor& tensor) {
  (name == "weight" ? weight : bias) = tensor;
}

BatchNorm2dImpl::BatchNorm2dImpl(int64_t num_features, BatchNormOptions options)
    : num_features_(num_features), options_(options) {
  SJ_REQUIRE(num_features > 0,
             "BatchNorm2d: num_features must be positive, "
             "got ",
             num_features);
  SJ_REQUIRE(options.eps > 0 && options.momentum >= 0 && options.momentum <= 1,
             "BatchNorm2d: expected eps > 0 and momentum in [0, 1], got eps ",
             options.eps, ", momentum ", options.momentum);
  if (options.affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked",
                                          zeros({}, {.dtype = DType::kI64}));
  }
}

Tensor BatchNorm2dImpl::forward(const Tensor& input) {
  SJ_REQUIRE(input.dim() == 4 && input.size(1) == num_features_,
             "BatchNorm2d: expected [N, ", num_features_, ", H, W], got ",
             ir::ShapeToString(input.shape()));
  const int64_t c = num_features_;
  const Shape per_channel{1, c, 1, 1};
  const bool training = is_training();
  Tensor mu, sigma2;
  if (training || !options_.track_running_stats) {
    const int64_t n = input.size(0) * input.size(2) * input.size(3);
    SJ_REQUIRE(!training || n > 1,
               "BatchNorm2d: expected more than 1 value per channel when "
               "training, got input ",
               ir::ShapeToString(input.shape()));
    mu = mean(input, {0, 2, 3}, /*keepdim=*/true);
    sigma2 = var(input, {0, 2, 3}, /*correction=*/0, /*keepdim=*/true);
    if (training && options_.track_running_stats) {
      NoGradGuard no_grad;
      const double m = options_.momentum;
      // PyTorch's update: the unbiased variance, n / (n - 1) of the biased.
      running_mean.mul_(1.0 - m).add_(
          mu.detach().reshape({c}).to(running_mean.dtype()), m);
      running_var.mul_(1.0 - m).add_(
          (sigma2.detach().reshape({c}) *
           (static_cast<double>(n) / static_cast<double>(n - 1)))
              .to(running_var.dtype()),
          m);
      // (In-place arithmetic is for floating tensors: a copy of the sum.)
      num_batches_tracked.copy_(num_batches_tracked +
                                wrap_scalar(1.0, num_batches_tracked));
    }
  } else {
    mu = running_mean.reshape(per_channel);
    sigma2 = running_var.reshape(per_channel);
  }
  Tensor y = (input - mu) * rsqrt(sigma2 + options_.eps);
  if (options_.affine)
    y = y * weight.reshape(per_channel) + bias.reshape(per_channel);
  return y;
}

void BatchNorm2dImpl::OnParameterReplaced(const std::string& name,
                                          const Tensor& tensor) {
  (name == "weight" ? weight : bias) = tensor;
}

template <ModuleTag kTag>
Tensor Pool2dImpl<kTag>::forward(const Tensor& input) {
  return kTag == ModuleTag::kMaxPool2d ? max_pool2d(input, options_)
                                       : avg_pool2d(input, options_);
}
AdaptiveAvgPool2dImpl::AdaptiveAvgPool2dImpl(std::array<int64_t, 2> output_size)
    : output_size_(output_size) {}
Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& input) {
  return adaptive_avg_pool2d(input, output_size_);
}

Tensor LinearImpl::forward(const Tensor& input) {
  return functional::linear(input, weight, bias);
}

Tensor ReLUImpl::forward(const Tensor& input) { return relu(input); }
Tensor TanhImpl::forward(const Tensor& input) { return tanh(input); }
Tensor SigmoidImpl::forward(const Tensor& input) { return sigmoid(input); }
Tensor SiLUImpl::forward(const Tensor& input) { return silu(input); }

GELUImpl::GELUImpl(std::string approximate)
    : approximate_(std::move(approximate)) {
  SJ_REQUIRE(approximate_ == "none" || approximate_ == "tanh",
             "GELU: approximate must be \"none\" or \"tanh\", got \"",
             approximate_, "\"");
}

Tensor GELUImpl::forward(const Tensor& input) {
  return gelu(input, approximate_);
}

LayerNormImpl::LayerNormImpl(std::vector<int64_t> normalized_shape, double eps,
                             bool elementwise_affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  CheckNormalizedShape("LayerNorm", normalized_shape_);
  SJ_REQUIRE(eps > 0, "LayerNorm: eps must be positive, got ", eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape_));
    bias = register_parameter("bias", zeros(normalized_shape_));
  }
}

Tensor LayerNormImpl::forward(const Tensor& input) {
  return layer_norm(input, normalized_shape_, weight, bias, eps_);
}

RMSNormImpl::RMSNormImpl(std::vector<int64_t> normalized_shape,
                         std::optional<double> eps, bool elementwise_affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  CheckNormalizedShape("RMSNorm", normalized_shape_);
  SJ_REQUIRE(!eps.has_value() || *eps >= 0,
             "RMSNorm: eps must not be negative, got ", eps.value_or(0));
  if (elementwise_affine)
    weight = register_parameter("weight", ones(normalized_shape_));
}

Tensor RMSNormImpl::forward(const Tensor& input) {
  return rms_norm(input, normalized_shape_, weight, eps_);
}

void RMSNormImpl::OnParameterReplaced(const std::string& name,
                                      const Tensor& tensor) {
  weight = tensor;
}

DropoutImpl::DropoutImpl(double p) : p_(p) {
  SJ_REQUIRE(p >= 0.0 && p <= 1.0,
             "Dropout: probability must be in [0, 1], got ", p);
}

Tensor DropoutImpl::forward(const Tensor& input) {
  return dropout(input, p_, is_training());
}

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim) {
  SJ_REQUIRE(num_embeddings > 0 && embedding_dim > 0,
             "Embedding: num_embeddings and embedding_dim must be positive, "
             "got (",
             num_embeddings, ", ", embedding_dim, ")");
  Tensor init;
  {
    NoGradGuard no_grad;
    init = randn({num_embeddings, embedding_dim});
  }
  weight = register_parameter("weight", init);
}

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  return embedding(weight, indices);
}

Tensor FlattenImpl::forward(const Tensor& input) {
  return input.flatten(start_dim_, end_dim_);
}

void SequentialImpl::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

const std::shared_ptr<Module>& SequentialImpl::operator[](size_t index) const {
  SJ_REQUIRE(index < modules_.size(), "Sequential: index ", index,
             " out of range for ", modules_.size(), " modules");
  return modules_[index];
}

Tensor SequentialImpl::forward(const Tensor& input) {
  return RecordedForward(input, [&] {
    Tensor x = input;
    for (const auto& module : modules_) x = (*module)(x);
    return x;
  });
}

void LinearImpl::OnParameterReplaced(const std::string& name, const Tensor& tensor) {
  (name == "weight" ? weight : bias) = tensor;
}
void LayerNormImpl::OnParameterReplaced(const std::string& name, const Tensor& tensor) {
  (name == "weight" ? weight : bias) = tensor;
}
void EmbeddingImpl::OnParameterReplaced(const std::string& name, const Tensor& tensor) {
  weight = tensor;
}

bool LinearImpl::DescribeForward(std::vector<uint64_t>& key,
                                 runtime::RoutineTensors& tensors) const {
  if (!IsExactly<LinearImpl>(*this) || !weight.defined()) return false;
  key.push_back(static_cast<uint64_t>(ModuleTag::kLinear));
  tensors.Add(weight);
  DescribeOptional(bias, key, tensors);
  return true;
}

namespace {
void DescribePair(const std::array<int64_t, 2>& v, std::vector<uint64_t>& key) {
  key.insert(key.end(),
             {static_cast<uint64_t>(v[0]), static_cast<uint64_t>(v[1])});
}
void DescribePool(const Pool2dOptions& o, std::vector<uint64_t>& key) {
  DescribePair(o.kernel_size, key);
  DescribePair(o.stride.value_or(o.kernel_size), key);
  DescribePair(o.padding, key);
  DescribePair(o.dilation, key);
  key.insert(key.end(), {uint64_t{o.ceil_mode}, uint64_t{o.count_include_pad}});
}
}  // namespace

bool Conv2dImpl::DescribeForward(std::vector<uint64_t>& key,
                                 runtime::RoutineTensors& tensors) const {
  if (!IsExactly<Conv2dImpl>(*this) || !weight.defined()) return false;
  key.push_back(static_cast<uint64_t>(ModuleTag::kConv2d));
  DescribePair(conv_.stride, key);
  DescribePair(conv_.padding, key);
  DescribePair(conv_.dilation, key);
  key.push_back(static_cast<uint64_t>(conv_.groups));
  tensors.Add(weight);
  DescribeOptional(bias, key, tensors);
  return true;
}

bool BatchNorm2dImpl::DescribeForward(std::vector<uint64_t>& key,
                                      runtime::RoutineTensors& tensors) const {
  if (!IsExactly<BatchNorm2dImpl>(*this)) return false;
  key.insert(key.end(),
             {static_cast<uint64_t>(ModuleTag::kBatchNorm2d),
              static_cast<uint64_t>(num_features_), KeyBits(options_.eps),
              KeyBits(options_.momentum), uint64_t{options_.affine},
              uint64_t{options_.track_running_stats}, uint64_t{is_training()}});
  for (const Tensor* t :
       {&weight, &bias, &running_mean, &running_var, &num_batches_tracked})
    DescribeOptional(*t, key, tensors);
  return true;
}

template <ModuleTag kTag>
bool Pool2dImpl<kTag>::DescribeForward(std::vector<uint64_t>& key,
                                       runtime::RoutineTensors& tensors) const {
  if (!IsExactly<Pool2dImpl<kTag>>(*this)) return false;
  key.push_back(static_cast<uint64_t>(kTag));
  DescribePool(options_, key);
  return true;
}

template class Pool2dImpl<ModuleTag::kMaxPool2d>;
template class Pool2dImpl<ModuleTag::kAvgPool2d>;

bool AdaptiveAvgPool2dImpl::DescribeForward(
    std::vector<uint64_t>& key, runtime::RoutineTensors& tensors) const {
  if (!IsExactly<AdaptiveAvgPool2dImpl>(*this)) return false;
  key.push_back(static_cast<uint64_t>(ModuleTag::kAdaptiveAvgPool2d));
  DescribePair(output_size_, key);
  return true;
}

bool ReLUImpl::DescribeForward(std::vector<uint64_t>& key,
                               runtime::RoutineTensors& tensors) const {
  return DescribeTagOnly<ReLUImpl>(*this, ModuleTag::kReLU, key);
}
bool TanhImpl::DescribeForward(std::vector<uint64_t>& key,
                               runtime::RoutineTensors& tensors) const {
  return DescribeTagOnly<TanhImpl>(*this, ModuleTag::kTanh, key);
}
bool SigmoidImpl::DescribeForward(std::vector<uint64_t>& key,
                                  runtime::RoutineTensors& tensors) const {
  return DescribeTagOnly<SigmoidImpl>(*this, ModuleTag::kSigmoid, key);
}
bool SiLUImpl::DescribeForward(std::vector<uint64_t>& key,
                               runtime::RoutineTensors& tensors) const {
  return DescribeTagOnly<SiLUImpl>(*this, ModuleTag::kSiLU, key);
}

bool GELUImpl::DescribeForward(std::vector<uint64_t>& key,
                               runtime::RoutineTensors& tensors) const {
  if (!DescribeTagOnly<GELUImpl>(*this, ModuleTag::kGELU, key)) return false;
  key.push_back(approximate_ == "tanh");
  return true;
}

bool LayerNormImpl::DescribeForward(std::vector<uint64_t>& key,
                                    runtime::RoutineTensors& tensors) const {
  if (!IsExactly<LayerNormImpl>(*this)) return false;
  key.push_back(static_cast<uint64_t>(ModuleTag::kLayerNorm));
  DescribeShape(normalized_shape_, key);
  key.push_back(KeyBits(eps_));
  DescribeOptional(weight, key, tensors);
  DescribeOptional(bias, key, tensors);
  return true;
}

bool RMSNormImpl::DescribeForward(std::vector<uint64_t>& key,
                                  runtime::RoutineTensors& tensors) const {
  if (!IsExactly<RMSNormImpl>(*this)) return false;
  key.push_back(static_cast<uint64_t>(ModuleTag::kRMSNorm));
  DescribeShape(normalized_shape_, key);
  key.insert(key.end(),
             {uint64_t{eps_.has_value()}, KeyBits(eps_.value_or(0))});
  DescribeOptional(weight, key, tensors);
  return true;
}

bool DropoutImpl::DescribeForward(std::vector<uint64_t>& key,
                                  runtime::RoutineTensors& tensors) const {
  if (!IsExactly<DropoutImpl>(*this)) return false;
  key.insert(key.end(), {static_cast<uint64_t>(ModuleTag::kDropout),
                         KeyBits(p_), uint64_t{is_training()}});
  return true;
}

bool EmbeddingImpl::DescribeForward(std::vector<uint64_t>& key,
                                    runtime::RoutineTensors& tensors) const {
  if (!IsExactly<EmbeddingImpl>(*this) || !weight.defined()) return false;
  key.push_back(static_cast<uint64_t>(ModuleTag::kEmbedding));
  tensors.Add(weight);
  return true;
}

bool FlattenImpl::DescribeForward(std::vector<uint64_t>& key,
                                  runtime::RoutineTensors& tensors) const {
  if (!IsExactly<FlattenImpl>(*this)) return false;
  key.insert(key.end(), {static_cast<uint64_t>(ModuleTag::kFlatten),
                         static_cast<uint64_t>(start_dim_),
                         static_cast<uint64_t>(end_dim_)});
  return true;
}

bool SequentialImpl::DescribeForward(std::vector<uint64_t>& key,
                                     runtime::RoutineTensors& tensors) const {
  if (!IsExactly<SequentialImpl>(*this)) return false;
  key.insert(key.end(),
             {static_cast<uint64_t>(ModuleTag::kSequential), modules_.size()});
  for (const auto& module : modules_) {
    if (!DescribeModule(module.get(), key, tensors)) return false;
  }
  return true;
}

}  // namespace stepjit::nn
