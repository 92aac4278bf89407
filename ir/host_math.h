// HostMath: the plain C++ backend for ir/scalar_def.h (eager CPU kernels and constant folding).
#ifndef STEPJIT_IR_HOST_MATH_H_
#define STEPJIT_IR_HOST_MATH_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ir/poly_math.h"

namespace stepjit::ir {

// V is the arithmetic type (float for f32/f16/bf16, double for f64, int64
// for integers, bool). Integers and bools never reach the float-only
// functions (type inference promotes them) but the templates must compile.
// exp, log, tanh and erf are ir/poly_math.h's, as in the generated CPU code;
// f64 erf is libm's there too.
template <typename C>
struct HostMath {
  using V = C;
  // The integers of ir/poly_math.h: the float's bits, wrapping arithmetic.
  using I = std::conditional_t<sizeof(C) == 8, int64_t, int32_t>;
  using U = std::make_unsigned_t<I>;
  static constexpr bool IsDouble() { return sizeof(C) == 8; }
  static C Const(double v) { return static_cast<C>(v); }
  // Integers wrap (two's complement, computed unsigned: signed overflow
  // would be undefined), as the generated CPU regions compute them.
  static constexpr bool kWraps =
      std::is_integral_v<C> && !std::is_same_v<C, bool>;
  template <typename T>
  using Unsigned = std::make_unsigned_t<T>;
  static C Add(C a, C b) {
    if constexpr (std::is_same_v<C, bool>) return a || b;
    else if constexpr (kWraps)
      return static_cast<C>(static_cast<Unsigned<C>>(a) +
                            static_cast<Unsigned<C>>(b));
    else return a + b;
  }
  static C Sub(C a, C b) {
    if constexpr (kWraps)
      return static_cast<C>(static_cast<Unsigned<C>>(a) -
                            static_cast<Unsigned<C>>(b));
    else
      return a - b;
  }
  static C Mul(C a, C b) {
    if constexpr (std::is_same_v<C, bool>) return a && b;
    else if constexpr (kWraps)
      return static_cast<C>(static_cast<Unsigned<C>>(a) *
                            static_cast<Unsigned<C>>(b));
    else return a * b;
  }
  static C Div(C a, C b) { return a / b; }
  // -a, not 0 - a: the sign of a zero matters.
  static C Neg(C a) {
    if constexpr (kWraps)
      return static_cast<C>(Unsigned<C>{0} - static_cast<Unsigned<C>>(a));
    else
      return -a;
  }
  static C Abs(C a) {
    if constexpr (std::is_floating_point_v<C>)
      return Pick(a < C(0), -a, a);
    else
      return a < C(0) ? -a : a;
  }
  static C Exp(C a) {
    if constexpr (std::is_floating_point_v<C>) {
      HostMath m;
      return PolyExp(m, a);
    } else {
      return std::exp(a);
    }
  }
  static C Log(C a) {
    if constexpr (std::is_floating_point_v<C>) {
      HostMath m;
      return PolyLog(m, a);
    } else {
      return std::log(a);
    }
  }
  static C Sqrt(C a) { return std::sqrt(a); }
  static C Tanh(C a) {
    if constexpr (std::is_floating_point_v<C>) {
      HostMath m;
      return PolyTanh(m, a);
    } else {
      return std::tanh(a);
    }
  }
  static C Erf(C a) {
    if constexpr (std::is_same_v<C, float>) {
      HostMath m;
      return PolyErfF32(m, a);
    } else {
      return std::erf(a);
    }
  }
  static C Sin(C a) { return std::sin(a); }
  static C Cos(C a) { return std::cos(a); }
  static C Pow(C a, C b) { return static_cast<C>(std::pow(a, b)); }
  // NaN-propagating, as torch.maximum / torch.minimum.
  static C Max(C a, C b) { return Pick((a != a) | (a > b), a, b); }
  static C Min(C a, C b) { return Pick((a != a) | (a < b), a, b); }
  static C Select(bool c, C a, C b) { return Pick(c, a, b); }
  static bool Eq(C a, C b) { return a == b; }
  static bool Ne(C a, C b) { return a != b; }
  static bool Lt(C a, C b) { return a < b; }
  static bool Le(C a, C b) { return a <= b; }
  static bool Gt(C a, C b) { return a > b; }
  static bool Ge(C a, C b) { return a >= b; }
  // Both sides (pure math, no side effects) and a blend, so that a loop of
  // it (ir/poly_math.h's tanh and erf) has no branch and vectorizes.
  template <class F, class G>
  static C Choose(bool c, F then, G otherwise) {
    const C a = then(), b = otherwise();
    return Pick(c, a, b);
  }
  static I Bits(C a) { return std::bit_cast<I>(a); }
  // c ? a : b for floats as a bit blend: no branch for the compiler to
  // thread or keep, so loops of Min/Max (exp's clamp) vectorize.
  static C Pick(bool c, C a, C b) {
    if constexpr (std::is_floating_point_v<C>) {
      const U mask = static_cast<U>(U{0} - static_cast<U>(c));
      return std::bit_cast<C>(static_cast<U>((std::bit_cast<U>(a) & mask) |
                                             (std::bit_cast<U>(b) & ~mask)));
    } else {
      return c ? a : b;
    }
  }
  static C FromBits(I a) { return std::bit_cast<C>(a); }
  static I IConst(int64_t v) { return static_cast<I>(v); }
  static I IAdd(I a, I b) {
    return static_cast<I>(static_cast<U>(a) + static_cast<U>(b));
  }
  static I ISub(I a, I b) {
    return static_cast<I>(static_cast<U>(a) - static_cast<U>(b));
  }
  static I IAnd(I a, I b) { return a & b; }
  static I IShl(I a, int k) { return static_cast<I>(static_cast<U>(a) << k); }
  static I IShrA(I a, int k) { return a >> k; }
  static C IToF(I a) { return static_cast<C>(a); }
};

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_HOST_MATH_H_
