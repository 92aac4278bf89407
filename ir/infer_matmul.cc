// Matmul type inference: operands, batch broadcasting, epilogue operands and
// the bias-gradient result.
#include "ir/infer_matmul.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "ir/gemm_epilogue.h"
#include "ir/status.h"

namespace stepjit::ir {
namespace {

constexpr OpId kOp = OpId::kMatmul;

// The `epilogue` attr of a matmul (see ir/ops.def): with two operands a mark
// (or, with a second result, the bias gradient), with a third (bias) operand
// what the GEMM call computes.
absl::Status CheckMatmulEpilogue(absl::Span<const TensorType> in,
                                 const Attrs& attrs, int64_t n) {
  const std::string text = attrs.GetString(AttrKey::kEpilogue);
  const bool absorbed = in.size() == 3;
  absl::StatusOr<GemmEpilogue> epilogue = ParseGemmEpilogue(text);
  if (!epilogue.ok())
    return InvalidInputs(kOp, in, epilogue.status().message());
  if (!epilogue->has_bias()) {
    if (!absorbed) return absl::OkStatus();
    return InvalidInputs(
        kOp, in,
        absl::StrCat("a bias operand needs epilogue = \"bias[,",
                     GemmActivationNames("|"), "]\", got '", text, "'"));
  }
  if (!absorbed) return absl::OkStatus();
  const TensorType& bias = in[2];
  if (bias.shape.size() != 1) {
    return InvalidInputs(kOp, in,
                         absl::StrCat("the bias must be 1-D [", n,
                                      "], got rank ", bias.shape.size()));
  }
  if (bias.shape[0] != n) {
    return InvalidInputs(
        kOp, in,
        absl::StrCat("the bias has ", bias.shape[0],
                     " elements but the output's last dim is ", n));
  }
  if (bias.dtype != in[0].dtype) {
    return InvalidInputs(
        kOp, in,
        absl::StrCat("the bias is ", DTypeName(bias.dtype),
                     " but the operands are ", DTypeName(in[0].dtype)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TensorType> InferMatmul(absl::Span<const TensorType> in,
                                       const Attrs& attrs) {
  const TensorType &a = in[0], &b = in[1];
  if (a.shape.size() < 2 || b.shape.size() < 2) {
    return InvalidInputs(kOp, in, "both operands need at least 2 dims");
  }
  if (a.dtype != b.dtype || !IsFloating(a.dtype)) {
    return InvalidInputs(kOp, in,
                         "operands need the same floating-point dtype");
  }
  const bool ta = attrs.GetBool(AttrKey::kTransposeA);
  const bool tb = attrs.GetBool(AttrKey::kTransposeB);
  const size_t ra = a.shape.size(), rb = b.shape.size();
  int64_t m = ta ? a.shape[ra - 1] : a.shape[ra - 2];
  int64_t ka = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  int64_t kb = tb ? b.shape[rb - 1] : b.shape[rb - 2];
  int64_t n = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  if (ka != kb) {
    return InvalidInputs(
        kOp, in,
        absl::StrCat("inner dimensions differ: ", ka, " vs ", kb,
                     ta || tb ? " (after transposes)" : ""));
  }
  auto batch = BroadcastShapes(ShapeRef(a.shape).subspan(0, ra - 2),
                               ShapeRef(b.shape).subspan(0, rb - 2));
  if (!batch.ok()) return InvalidInputs(kOp, in, batch.status().message());
  Shape out = *batch;
  out.push_back(m);
  out.push_back(n);
  RETURN_IF_ERROR(CheckMatmulEpilogue(in, attrs, n));
  return TensorType{a.dtype, out};
}

absl::StatusOr<TensorType> InferMatmulBiasGrad(absl::Span<const TensorType> in,
                                               const Attrs& attrs) {
  const std::string epilogue = attrs.GetString(AttrKey::kEpilogue);
  if (in.size() != 2 || epilogue != GemmEpilogueText(GemmEpilogue::Bgrad())) {
    return InvalidInputs(
        kOp, in,
        absl::StrCat("a second result (the bias gradient) needs 2 operands "
                     "and epilogue = \"bgrad\", got ",
                     in.size(), " operands and epilogue '", epilogue, "'"));
  }
  if (in[0].shape.size() != 2 || in[1].shape.size() != 2) {
    return InvalidInputs(
        kOp, in,
        absl::StrCat("a bias gradient needs 2-D operands (a batched product "
                     "has none), got ranks ",
                     in[0].shape.size(), " and ", in[1].shape.size()));
  }
  const bool ta = attrs.GetBool(AttrKey::kTransposeA);
  return TensorType{in[0].dtype, {ta ? in[0].shape[1] : in[0].shape[0]}};
}

}  // namespace stepjit::ir
