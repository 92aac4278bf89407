// The epilogue of a matmul's GEMM call as a typed value: the `epilogue` attr
// (ir/ops.def) parsed and printed here once, read by type inference, the
// passes and the runtime's GEMM plans.
#ifndef STEPJIT_IR_GEMM_EPILOGUE_H_
#define STEPJIT_IR_GEMM_EPILOGUE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/attrs.h"
#include "ir/op.h"

namespace stepjit::ir {

// "" (none), "bias", "bias,<act>", "bgrad".
enum class GemmEpilogueKind { kNone, kBias, kBiasAct, kBgrad };

struct GemmEpilogue {
  GemmEpilogueKind kind = GemmEpilogueKind::kNone;
  // For kBiasAct: a unary elementwise op the table marks kGemmActivation,
  // applied to every element last, as its scalar definition says.
  OpId activation = OpId::kRelu;

  static GemmEpilogue Bias() { return {GemmEpilogueKind::kBias}; }
  static GemmEpilogue BiasAct(OpId act) {
    return {GemmEpilogueKind::kBiasAct, act};
  }
  static GemmEpilogue Bgrad() { return {GemmEpilogueKind::kBgrad}; }
  bool has_bias() const {
    return kind == GemmEpilogueKind::kBias ||
           kind == GemmEpilogueKind::kBiasAct;
  }
  bool operator==(const GemmEpilogue& o) const {
    return kind == o.kind &&
           (kind != GemmEpilogueKind::kBiasAct || activation == o.activation);
  }
};

// The attr text: "", "bias", "bias,gelu", "bgrad".
std::string GemmEpilogueText(const GemmEpilogue& e);

// InvalidArgument "unknown epilogue 'x' (expected "bias" optionally followed
// by ",relu", ",gelu" or ",gelu_tanh", or "bgrad")", the activations as the
// table lists them.
absl::StatusOr<GemmEpilogue> ParseGemmEpilogue(absl::string_view text);

// A verified node's epilogue (type inference checked the text).
GemmEpilogue GemmEpilogueOf(const Attrs& attrs);

// The ops the table marks kGemmActivation, joined: "relu|gelu|gelu_tanh|silu".
std::string GemmActivationNames(absl::string_view separator);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_GEMM_EPILOGUE_H_
