// Residual blocks (see resnet.h).
#include "training/nn/resnet.h"

#include "ir/status.h"
#include "runtime/ops.h"

namespace stepjit::nn {

BasicBlockImpl::BasicBlockImpl(int64_t in_channels, int64_t out_channels,
                               int64_t stride) {
  SJ_REQUIRE(in_channels >= 1 && out_channels >= 1 && stride >= 1,
             "BasicBlock: expected channels >= 1 and stride >= 1, found ",
             in_channels, " -> ", out_channels, " channels, stride ", stride);
  conv1 = register_module("conv1",
                          Conv2d(in_channels, out_channels, 3,
                                 Conv2dModuleOptions{.stride = {stride, stride},
                                                     .padding = {1, 1},
                                                     .bias = false}));
  bn1 = register_module("bn1", BatchNorm2d(out_channels));
  conv2 = register_module(
      "conv2", Conv2d(out_channels, out_channels, 3,
                      Conv2dModuleOptions{.padding = {1, 1}, .bias = false}));
  bn2 = register_module("bn2", BatchNorm2d(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    downsample = register_module(
        "downsample",
        Sequential(Conv2d(in_channels, out_channels, 1,
                          Conv2dModuleOptions{.stride = {stride, stride},
                                              .bias = false}),
                   BatchNorm2d(out_channels)));
  }
}

Tensor BasicBlockImpl::forward(const Tensor& x) {
  const Tensor r = bn2(conv2(relu(bn1(conv1(x)))));
  return relu(r + (downsample.ptr() != nullptr ? downsample(x) : x));
}

}  // namespace stepjit::nn
