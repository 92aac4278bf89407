// HostMath: the plain C++ backend for ir/scalar_def.h (eager CPU kernels and constant folding).
#ifndef STEPJIT_IR_HOST_MATH_H_
#define STEPJIT_IR_HOST_MATH_H_

#include <cmath>
#include <type_traits>

namespace stepjit::ir {

// V is the arithmetic type (float for f32/f16/bf16, double for f64, int64
// for integers, bool). Integers and bools never reach the float-only
// functions (type inference promotes them) but the templates must compile.
template <typename C>
struct HostMath {
  using V = C;
  static C Const(double v) { return static_cast<C>(v); }
  static C Add(C a, C b) {
    if constexpr (std::is_same_v<C, bool>) return a || b;
    else return a + b;
  }
  static C Sub(C a, C b) { return a - b; }
  static C Mul(C a, C b) {
    if constexpr (std::is_same_v<C, bool>) return a && b;
    else return a * b;
  }
  static C Div(C a, C b) { return a / b; }
  // -a, not 0 - a: the sign of a zero matters.
  static C Neg(C a) { return -a; }
  static C Abs(C a) { return a < C(0) ? -a : a; }
  static C Exp(C a) { return std::exp(a); }
  static C Log(C a) { return std::log(a); }
  static C Sqrt(C a) { return std::sqrt(a); }
  static C Tanh(C a) { return std::tanh(a); }
  static C Erf(C a) { return std::erf(a); }
  static C Sin(C a) { return std::sin(a); }
  static C Cos(C a) { return std::cos(a); }
  static C Pow(C a, C b) { return static_cast<C>(std::pow(a, b)); }
  // NaN-propagating, as torch.maximum / torch.minimum.
  static C Max(C a, C b) { return (a != a || a > b) ? a : b; }
  static C Min(C a, C b) { return (a != a || a < b) ? a : b; }
  static C Select(bool c, C a, C b) { return c ? a : b; }
  static bool Eq(C a, C b) { return a == b; }
  static bool Ne(C a, C b) { return a != b; }
  static bool Lt(C a, C b) { return a < b; }
  static bool Le(C a, C b) { return a <= b; }
  static bool Gt(C a, C b) { return a > b; }
  static bool Ge(C a, C b) { return a >= b; }
};

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_HOST_MATH_H_
