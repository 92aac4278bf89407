// Window geometry of the convolution and pooling ops (ir/conv.h).
#include "ir/conv.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/op_attrs.h"
#include "ir/status.h"

namespace stepjit::ir {

namespace {

absl::Status Problem(OpId op, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(OpName(op), ": ", what));
}

// The largest window size, stride, padding or dilation: far beyond any
// image, and small enough that the size arithmetic cannot overflow.
constexpr int64_t kMaxWindowValue = int64_t{1} << 30;

// A [height, width] attribute: two values, each at least `least`.
absl::StatusOr<std::array<int64_t, 2>> Pair(OpId op, const Attrs& attrs,
                                            AttrKey key, int64_t least) {
  const std::vector<int64_t> v = attrs.GetInts(key);
  if (v.size() != 2) {
    return Problem(
        op, absl::StrCat(AttrKeyName(key), " must be [height, width], got [",
                         absl::StrJoin(v, ", "), "]"));
  }
  for (int64_t x : v) {
    if (x < least || x > kMaxWindowValue) {
      return Problem(op, absl::StrCat(AttrKeyName(key), " must be >= ", least,
                                      " and <= ", kMaxWindowValue, ", got [",
                                      absl::StrJoin(v, ", "), "]"));
    }
  }
  return std::array<int64_t, 2>{v[0], v[1]};
}

bool IsPool(OpId op) {
  return op == OpId::kMaxPool2d || op == OpId::kMaxPool2dBackward ||
         op == OpId::kAvgPool2d || op == OpId::kAvgPool2dBackward;
}

bool IsMaxPool(OpId op) {
  return op == OpId::kMaxPool2d || op == OpId::kMaxPool2dBackward;
}

}  // namespace

absl::StatusOr<Window2d> WindowOf(OpId op, const Attrs& attrs,
                                  ShapeRef weight_shape) {
  Window2d w;
  if (IsPool(op)) {
    ASSIGN_OR_RETURN(w.kernel, Pair(op, attrs, AttrKey::kKernelSize, 1));
  } else {
    if (weight_shape.size() != 4) {
      return Problem(op, absl::StrCat("weight must be [out_channels, "
                                      "in_channels / groups, kh, kw], got ",
                                      ShapeToString(weight_shape)));
    }
    w.kernel = {weight_shape[2], weight_shape[3]};
    if (w.kernel[0] < 1 || w.kernel[1] < 1 || w.kernel[0] > kMaxWindowValue ||
        w.kernel[1] > kMaxWindowValue) {
      return Problem(
          op, absl::StrCat("the weight's kernel must be 1 to ", kMaxWindowValue,
                           " wide, got ", ShapeToString(weight_shape)));
    }
    w.groups = attrs.GetInt(AttrKey::kGroups, 1);
    if (w.groups < 1)
      return Problem(op, absl::StrCat("groups must be >= 1, got ", w.groups));
  }
  ASSIGN_OR_RETURN(w.stride, Pair(op, attrs, AttrKey::kStride, 1));
  ASSIGN_OR_RETURN(w.padding, Pair(op, attrs, AttrKey::kPadding, 0));
  if (IsMaxPool(op) || !IsPool(op)) {
    ASSIGN_OR_RETURN(w.dilation, Pair(op, attrs, AttrKey::kDilation, 1));
  }
  if (IsPool(op)) {
    w.ceil_mode = AttrBool(op, attrs, AttrKey::kCeilMode);
    if (!IsMaxPool(op))
      w.count_include_pad = AttrBool(op, attrs, AttrKey::kCountIncludePad);
    for (int d = 0; d < 2; ++d) {
      if (2 * w.padding[d] > w.kernel[d]) {
        return Problem(
            op, absl::StrCat("padding should be at most half of the kernel "
                             "size, got padding [",
                             w.padding[0], ", ", w.padding[1], "] for kernel [",
                             w.kernel[0], ", ", w.kernel[1], "]"));
      }
    }
  }
  return w;
}

int64_t WindowOutputSize(int64_t in, int64_t kernel, int64_t stride,
                         int64_t padding, int64_t dilation, bool ceil_mode) {
  const int64_t span = in + 2 * padding - dilation * (kernel - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (span + (ceil_mode ? stride - 1 : 0)) / stride + 1;
  if (ceil_mode && (out - 1) * stride >= in + padding) --out;
  return out;
}

absl::StatusOr<Shape> WindowOutputShape(ShapeRef input, const Window2d& w,
                                        int64_t channels) {
  Shape out{input[0], channels, 0, 0};
  for (int d = 0; d < 2; ++d) {
    out[2 + d] = WindowOutputSize(input[2 + d], w.kernel[d], w.stride[d],
                                  w.padding[d], w.dilation[d], w.ceil_mode);
    if (out[2 + d] < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", d == 0 ? "height" : "width", " ", input[2 + d], " padded by ",
          w.padding[d], " on each side is smaller than the ", "kernel ",
          w.kernel[d], " dilated by ", w.dilation[d], ": no window fits"));
    }
  }
  return out;
}

int64_t AvgPoolDivisor(const Window2d& w, int64_t h0, int64_t w0,
                       int64_t height, int64_t width) {
  int64_t h1 = std::min(h0 + w.kernel[0], height + w.padding[0]);
  int64_t w1 = std::min(w0 + w.kernel[1], width + w.padding[1]);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, height);
  w1 = std::min(w1, width);
  if (h0 >= h1 || w0 >= w1) return 0;
  return w.count_include_pad ? padded : (h1 - h0) * (w1 - w0);
}

}  // namespace stepjit::ir
