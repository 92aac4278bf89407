// The window geometry of conv2d, max_pool2d, avg_pool2d and their gradients
// (ir/ops.def): the attributes, checked once, and the output sizes they
// give. The type rules (ir/infer_conv.cc) and every kernel read them here.
#ifndef STEPJIT_IR_CONV_H_
#define STEPJIT_IR_CONV_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "ir/attrs.h"
#include "ir/op.h"
#include "ir/shape.h"

namespace stepjit::ir {

// [height, width] of each window attribute. A convolution's kernel size is
// its weight's; groups is 1 for pooling.
struct Window2d {
  std::array<int64_t, 2> kernel{1, 1};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool ceil_mode = false;
  bool count_include_pad = true;
};

// The window of a node of `op` (any kConvolution op): its attributes,
// checked (two positive strides and dilations, two paddings >= 0, groups
// >= 1; a pool's kernel sizes >= 1 and paddings at most half the kernel,
// as PyTorch asks). A convolution's kernel comes from `weight_shape`
// ([O, C / groups, KH, KW]; for the weight gradient, its shape attribute).
absl::StatusOr<Window2d> WindowOf(OpId op, const Attrs& attrs,
                                  ShapeRef weight_shape = {});

// Output size along one spatial dim: floor((in + 2 p - d (k - 1) - 1) / s)
// + 1, rounded up instead with ceil_mode unless the last window would start
// in the trailing padding. Below 1 when the window does not fit.
int64_t WindowOutputSize(int64_t in, int64_t kernel, int64_t stride,
                         int64_t padding, int64_t dilation, bool ceil_mode);

// The [N, channels, OH, OW] a window op gives an [N, C, H, W] input with
// `channels` output channels; an error naming the sizes when a spatial dim
// is left without a window.
absl::StatusOr<Shape> WindowOutputShape(ShapeRef input, const Window2d& w,
                                        int64_t channels);

// An avg_pool2d window's divisor: its size clipped to the padded input
// (count_include_pad) or to the input, for the window starting at (h0, w0)
// (padded coordinates minus the padding).
int64_t AvgPoolDivisor(const Window2d& w, int64_t h0, int64_t w0,
                       int64_t height, int64_t width);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_CONV_H_
