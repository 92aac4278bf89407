// DType names and promotion.
#include "ir/dtype.h"
#include "absl/strings/string_view.h"

namespace stepjit::ir {

absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kBool: return "bool";
  }
  return "?";
}

std::optional<DType> ParseDType(absl::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    DType t = static_cast<DType>(i);
    if (DTypeName(t) == name) return t;
  }
  return std::nullopt;
}

namespace {
int Rank(DType t) {  // position in bool < ints < floats
  switch (t) {
    case DType::kBool: return 0;
    case DType::kI32: return 1;
    case DType::kI64: return 2;
    case DType::kF16: return 3;
    case DType::kBF16: return 3;
    case DType::kF32: return 4;
    case DType::kF64: return 5;
  }
  return 0;
}
}  // namespace

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  // f16 with bf16 has no common 16-bit type: PyTorch promotes to f32.
  if ((a == DType::kF16 && b == DType::kBF16) ||
      (a == DType::kBF16 && b == DType::kF16)) {
    return DType::kF32;
  }
  return Rank(a) >= Rank(b) ? a : b;
}

}  // namespace stepjit::ir
