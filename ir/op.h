// Op identities and traits generated from ir/ops.def.
#ifndef STEPJIT_IR_OP_H_
#define STEPJIT_IR_OP_H_

#include <cstdint>
#include <optional>
#include "absl/strings/string_view.h"

namespace stepjit::ir {

enum class OpId : uint16_t {
#define OP(e, text, lo, hi, kind, amp, flags) k##e,
#include "ir/ops.def"
};
inline constexpr int kNumOps = 0
#define OP(e, text, lo, hi, kind, amp, flags) +1
#include "ir/ops.def"
    ;

enum class OpKind : uint8_t {
  kElementwise,
  kReduction,
  kNormalization,
  kLoss,
  kMatmul,
  kView,
  kDataMovement,
  kFactory,
  kRandom,
  kInplaceUpdate,
  kCollective,
  // Windows over the two trailing (spatial) dims of [N, C, H, W]:
  // convolutions, pooling and their gradients.
  kConvolution,
};

enum class AmpPolicy : uint8_t { kNone, kLower, kFp32, kPromote };

enum OpFlags : uint32_t {
  kNoFlags = 0,
  kDiff = 1u << 0,
  kPure = 1u << 1,
  kInplace = 1u << 2,
  kCommutative = 1u << 3,
  // Elementwise ops whose result is floating-point for integer or bool
  // inputs (they promote to f32), as exp, sigmoid, div.
  kFloatResult = 1u << 4,
  // Unary elementwise ops a GEMM may apply to its result in its epilogue
  // (ir/gemm_epilogue.h): `matmul ... {epilogue = "bias,<op>"}`.
  kGemmActivation = 1u << 5,
  // What a fusion region may hold besides elementwise ops and in-place
  // updates (ir/region_ops.h says in which attribute forms):
  // views whose element order is their input's (reshape, squeeze, ...),
  kOrderedView = 1u << 6,
  // reductions a region computes with one accumulator per output element,
  kFusedReduction = 1u << 7,
  // and row ops the region code generators expand into chained reductions
  // over a row (codegen/region_expand.h).
  kRowReduction = 1u << 8,
};

struct OpInfo {
  const char* name;
  int min_arity;
  int max_arity;
  OpKind kind;
  AmpPolicy amp;
  uint32_t flags;
};

const OpInfo& GetOpInfo(OpId op);
inline absl::string_view OpName(OpId op) { return GetOpInfo(op).name; }
std::optional<OpId> ParseOpName(absl::string_view name);

inline bool IsElementwise(OpId op) {
  return GetOpInfo(op).kind == OpKind::kElementwise;
}
inline bool IsView(OpId op) { return GetOpInfo(op).kind == OpKind::kView; }
inline bool IsInplace(OpId op) { return GetOpInfo(op).flags & kInplace; }
inline bool IsDifferentiable(OpId op) { return GetOpInfo(op).flags & kDiff; }
inline bool IsPure(OpId op) { return GetOpInfo(op).flags & kPure; }
inline bool IsCollective(OpId op) {
  return GetOpInfo(op).kind == OpKind::kCollective;
}
inline bool IsRandom(OpId op) { return GetOpInfo(op).kind == OpKind::kRandom; }
// Whether a random op with `num_inputs` operands takes the graph's random
// state as its last one (ops.def: one operand more than its own).
inline bool TakesRandomState(OpId op, size_t num_inputs) {
  return IsRandom(op) &&
         num_inputs == static_cast<size_t>(GetOpInfo(op).min_arity) + 1;
}
inline bool HasFloatResult(OpId op) {
  return GetOpInfo(op).flags & kFloatResult;
}
inline bool IsGemmActivation(OpId op) {
  return GetOpInfo(op).flags & kGemmActivation;
}
inline bool IsOrderedView(OpId op) {
  return GetOpInfo(op).flags & kOrderedView;
}
inline bool IsFusedReduction(OpId op) {
  return GetOpInfo(op).flags & kFusedReduction;
}
inline bool IsRowReduction(OpId op) {
  return GetOpInfo(op).flags & kRowReduction;
}

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_OP_H_
