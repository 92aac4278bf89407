// Residual blocks for image models, with torchvision's names: BasicBlock
// (conv1, bn1, conv2, bn2, and downsample.0 / downsample.1 when the shape
// changes), so that state_dict keys match a torchvision-style ResNet.
#ifndef STEPJIT_TRAINING_NN_RESNET_H_
#define STEPJIT_TRAINING_NN_RESNET_H_

#include <cstdint>

#include "training/nn/layers.h"
#include "training/nn/module.h"

namespace stepjit::nn {

// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)): two 3x3 convolutions
// without bias (the first with `stride`), each followed by batch norm. The
// shortcut is x itself, or a strided 1x1 convolution and batch norm
// (`downsample`) when the stride or the channel count changes. Input and
// output are [N, C, H, W].
class BasicBlockImpl : public Module {
 public:
  BasicBlockImpl(int64_t in_channels, int64_t out_channels, int64_t stride = 1);
  Tensor forward(const Tensor& x) override;

  Conv2d conv1{nullptr}, conv2{nullptr};
  BatchNorm2d bn1{nullptr}, bn2{nullptr};
  Sequential downsample{nullptr};  // null when the shortcut is x
};
using BasicBlock = ModuleHolder<BasicBlockImpl>;

}  // namespace stepjit::nn

#endif  // STEPJIT_TRAINING_NN_RESNET_H_
