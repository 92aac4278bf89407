// Element types: the DType enum, its properties, and the 16-bit float types.
#ifndef STEPJIT_IR_DTYPE_H_
#define STEPJIT_IR_DTYPE_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include "absl/strings/string_view.h"

namespace stepjit::ir {

enum class DType : uint8_t { kF32, kF64, kF16, kBF16, kI64, kI32, kBool };
inline constexpr int kNumDTypes = 7;

// IEEE binary16 storage; arithmetic happens in float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  operator float() const;
};

// bfloat16 storage (upper half of a float); arithmetic happens in float.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a quiet NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x40);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    bits = static_cast<uint16_t>(u >> 16);
  }
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

inline Half::Half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    bits = static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
    return;
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (abs < 0x38800000u) {  // subnormal half (or zero): scale into place
    float af;
    std::memcpy(&af, &abs, 4);
    // Adding 0.5 makes the FPU round to the half subnormal grid (2^-24).
    af += 0.5f;
    uint32_t r;
    std::memcpy(&r, &af, 4);
    bits = static_cast<uint16_t>(sign | (r - 0x3f000000u));
    return;
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  bits = static_cast<uint16_t>(sign | (abs >> 13));
}

inline Half::operator float() const {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
      std::memcpy(&out, &f, 4);
      out |= sign;
    }
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

constexpr int64_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI64: return 8;
    case DType::kI32: return 4;
    case DType::kBool: return 1;
  }
  return 0;
}

constexpr bool IsFloating(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 ||
         t == DType::kBF16;
}
constexpr bool IsIntegral(DType t) {
  return t == DType::kI64 || t == DType::kI32;
}

// Short names used in IR text and messages: f32, f64, f16, bf16, i64, i32, bool.
absl::string_view DTypeName(DType t);
std::optional<DType> ParseDType(absl::string_view name);

// PyTorch's promotion lattice for two tensor dtypes of the same "priority".
DType PromoteTypes(DType a, DType b);

// C++ storage type for each dtype, and the type arithmetic happens in.
template <DType> struct DTypeTraits;
template <> struct DTypeTraits<DType::kF32> { using T = float; using Acc = float; };
template <> struct DTypeTraits<DType::kF64> { using T = double; using Acc = double; };
template <> struct DTypeTraits<DType::kF16> { using T = Half; using Acc = float; };
template <> struct DTypeTraits<DType::kBF16> { using T = BFloat16; using Acc = float; };
template <> struct DTypeTraits<DType::kI64> { using T = int64_t; using Acc = int64_t; };
template <> struct DTypeTraits<DType::kI32> { using T = int32_t; using Acc = int64_t; };
template <> struct DTypeTraits<DType::kBool> { using T = bool; using Acc = bool; };

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_DTYPE_H_
