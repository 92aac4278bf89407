// Type rules of conv2d, max_pool2d, avg_pool2d and their gradients.
#include "ir/infer_conv.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/conv.h"
#include "ir/infer_matmul.h"
#include "ir/status.h"

namespace stepjit::ir {

namespace {

absl::Status NeedImages(OpId op, absl::Span<const TensorType> in,
                        const TensorType& t, const char* what,
                        const char* layout = "[N, C, H, W]") {
  if (t.shape.size() != 4) {
    return InvalidInputs(op, in,
                         absl::StrCat(what, " must be 4-D ", layout, ", got ",
                                      ShapeToString(t.shape)));
  }
  if (!IsFloating(t.dtype)) {
    return InvalidInputs(
        op, in,
        absl::StrCat(what, " must be floating, got ", DTypeName(t.dtype)));
  }
  return absl::OkStatus();
}

absl::Status SameDTypes(OpId op, absl::Span<const TensorType> in) {
  for (const TensorType& t : in) {
    if (t.dtype != in[0].dtype) {
      return InvalidInputs(op, in, "operands must share one dtype");
    }
  }
  return absl::OkStatus();
}

// conv2d's output for `input` and `weight` shapes, checking channels.
absl::StatusOr<Shape> ConvOutput(OpId op, absl::Span<const TensorType> in,
                                 ShapeRef input, ShapeRef weight,
                                 const Window2d& w) {
  const int64_t channels = input[1], out_channels = weight[0];
  int64_t expected = 0;  // (groups comes from IR text: any int64)
  const bool overflow = __builtin_mul_overflow(weight[1], w.groups, &expected);
  if (overflow || expected != channels) {
    return InvalidInputs(
        op, in,
        absl::StrCat("the weight ", ShapeToString(weight), " expects ",
                     weight[1], " x ", w.groups, " (groups)",
                     overflow ? std::string() : absl::StrCat(" = ", expected),
                     " input channels, the input ", ShapeToString(input),
                     " has ", channels));
  }
  if (out_channels % w.groups != 0) {
    return InvalidInputs(
        op, in,
        absl::StrCat(out_channels, " output channels do not divide into ",
                     w.groups, " groups"));
  }
  absl::StatusOr<Shape> out = WindowOutputShape(input, w, out_channels);
  if (!out.ok()) return InvalidInputs(op, in, out.status().message());
  return out;
}

absl::StatusOr<Shape> ShapeAttr(OpId op, absl::Span<const TensorType> in,
                                const Attrs& attrs, AttrKey key) {
  const std::vector<int64_t> v = attrs.GetInts(key);
  const Shape s(v.begin(), v.end());
  if (s.size() != 4) {
    return InvalidInputs(
        op, in,
        absl::StrCat(AttrKeyName(key), " must be 4-D, got ", ShapeToString(s)));
  }
  if (absl::Status st = ValidateShape(s); !st.ok())
    return InvalidInputs(op, in,
                         absl::StrCat(AttrKeyName(key), ": ", st.message()));
  return s;
}

absl::Status GradMatches(OpId op, absl::Span<const TensorType> in,
                         ShapeRef expected) {
  if (in[0].shape != Shape(expected.begin(), expected.end())) {
    return InvalidInputs(
        op, in,
        absl::StrCat("the gradient must have the forward result's shape ",
                     ShapeToString(expected), ", got ",
                     ShapeToString(in[0].shape)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TensorType> InferConvolution(OpId op,
                                            absl::Span<const TensorType> in,
                                            const Attrs& attrs) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (op == OpId::kConv2d && i == 2) continue;  // the bias
    if (op == OpId::kAvgPool2dBackward) break;    // checked below
    const bool weight =
        i == 1 && (op == OpId::kConv2d || op == OpId::kConv2dBackwardInput);
    RETURN_IF_ERROR(
        NeedImages(op, in, in[i],
                   i == 0   ? "the first operand"
                   : weight ? "the weight"
                            : "the second operand",
                   weight ? "[O, C / groups, KH, KW]" : "[N, C, H, W]"));
  }
  RETURN_IF_ERROR(SameDTypes(op, in));
  auto window = [&](ShapeRef weight) -> absl::StatusOr<Window2d> {
    absl::StatusOr<Window2d> w = WindowOf(op, attrs, weight);
    if (!w.ok()) return InvalidInputs(op, in, w.status().message());
    return w;
  };
  switch (op) {
    case OpId::kConv2d: {
      ASSIGN_OR_RETURN(const Window2d w, window(in[1].shape));
      ASSIGN_OR_RETURN(Shape out,
                       ConvOutput(op, in, in[0].shape, in[1].shape, w));
      if (in.size() == 3 && in[2].shape != Shape{in[1].shape[0]}) {
        return InvalidInputs(op, in,
                             absl::StrCat("the bias must be [", in[1].shape[0],
                                          "] (one per output channel), got ",
                                          ShapeToString(in[2].shape)));
      }
      return TensorType{in[0].dtype, std::move(out)};
    }
    case OpId::kConv2dBackwardInput: {
      ASSIGN_OR_RETURN(const Shape input,
                       ShapeAttr(op, in, attrs, AttrKey::kInputShape));
      ASSIGN_OR_RETURN(const Window2d w, window(in[1].shape));
      ASSIGN_OR_RETURN(const Shape out,
                       ConvOutput(op, in, input, in[1].shape, w));
      RETURN_IF_ERROR(GradMatches(op, in, out));
      return TensorType{in[0].dtype, input};
    }
    case OpId::kConv2dBackwardWeight: {
      ASSIGN_OR_RETURN(const Shape weight,
                       ShapeAttr(op, in, attrs, AttrKey::kShape));
      ASSIGN_OR_RETURN(const Window2d w, window(weight));
      ASSIGN_OR_RETURN(const Shape out,
                       ConvOutput(op, in, in[1].shape, weight, w));
      RETURN_IF_ERROR(GradMatches(op, in, out));
      return TensorType{in[0].dtype, weight};
    }
    case OpId::kMaxPool2d:
    case OpId::kAvgPool2d: {
      ASSIGN_OR_RETURN(const Window2d w, window({}));
      absl::StatusOr<Shape> out =
          WindowOutputShape(in[0].shape, w, in[0].shape[1]);
      if (!out.ok()) return InvalidInputs(op, in, out.status().message());
      return TensorType{in[0].dtype, *std::move(out)};
    }
    case OpId::kMaxPool2dBackward: {
      ASSIGN_OR_RETURN(const Window2d w, window({}));
      absl::StatusOr<Shape> out =
          WindowOutputShape(in[1].shape, w, in[1].shape[1]);
      if (!out.ok()) return InvalidInputs(op, in, out.status().message());
      RETURN_IF_ERROR(GradMatches(op, in, *out));
      return in[1];
    }
    case OpId::kAvgPool2dBackward: {
      RETURN_IF_ERROR(NeedImages(op, in, in[0], "the gradient"));
      ASSIGN_OR_RETURN(const Shape input,
                       ShapeAttr(op, in, attrs, AttrKey::kInputShape));
      ASSIGN_OR_RETURN(const Window2d w, window({}));
      absl::StatusOr<Shape> out = WindowOutputShape(input, w, input[1]);
      if (!out.ok()) return InvalidInputs(op, in, out.status().message());
      RETURN_IF_ERROR(GradMatches(op, in, *out));
      return TensorType{in[0].dtype, input};
    }
    default:
      return InvalidInputs(op, in, "not a convolution or pooling op");
  }
}

}  // namespace stepjit::ir
