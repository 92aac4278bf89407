// The scalar semantics of every elementwise op, written once over a math backend.
//
// A backend M supplies a value type M::V and primitives (Add, Mul, Exp, Erf,
// Select, comparisons, Const ...). The CPU eager kernels instantiate these
// with plain C++ arithmetic; code generators instantiate them with builders
// that emit LLVM IR or CUDA C. Adding an op means one row in ops.def and one
// definition here; no backend has per-op code.
#ifndef STEPJIT_IR_SCALAR_DEF_H_
#define STEPJIT_IR_SCALAR_DEF_H_

#include "ir/op.h"

namespace stepjit::ir {

// X(OpEnum, expression in m and x)
#define SJ_UNARY_SCALAR_DEFS(X)                                                 \
  X(Neg, m.Neg(x))                                                              \
  X(Abs, m.Abs(x))                                                              \
  X(Sign, m.Sub(m.Select(m.Gt(x, m.Const(0)), m.Const(1), m.Const(0)),          \
                m.Select(m.Lt(x, m.Const(0)), m.Const(1), m.Const(0))))         \
  X(Exp, m.Exp(x))                                                              \
  X(Log, m.Log(x))                                                              \
  X(Sqrt, m.Sqrt(x))                                                            \
  X(Rsqrt, m.Div(m.Const(1), m.Sqrt(x)))                                        \
  X(Reciprocal, m.Div(m.Const(1), x))                                           \
  X(Tanh, m.Tanh(x))                                                            \
  X(Erf, m.Erf(x))                                                              \
  X(Sigmoid, m.Div(m.Const(1), m.Add(m.Const(1), m.Exp(m.Neg(x)))))             \
  X(Relu, m.Max(x, m.Const(0)))  /* Max propagates NaN */                        \
  X(Gelu, m.Mul(m.Mul(m.Const(0.5), x),                                         \
                m.Add(m.Const(1), m.Erf(m.Mul(x, m.Const(0.70710678118654752))))))\
  X(GeluTanh,                                                                   \
    m.Mul(m.Mul(m.Const(0.5), x),                                               \
          m.Add(m.Const(1),                                                     \
                m.Tanh(m.Mul(m.Const(0.79788456080286536),                      \
                             m.Add(x, m.Mul(m.Const(0.044715),                  \
                                            m.Mul(x, m.Mul(x, x)))))))))        \
  X(Silu, m.Mul(x, m.Div(m.Const(1), m.Add(m.Const(1), m.Exp(m.Neg(x))))))    \
  X(Sin, m.Sin(x))                                                              \
  X(Cos, m.Cos(x))

// X(OpEnum, expression in m, a and b); comparisons yield M's boolean type.
#define SJ_BINARY_SCALAR_DEFS(X)        \
  X(Add, m.Add(a, b))                   \
  X(Sub, m.Sub(a, b))                   \
  X(Mul, m.Mul(a, b))                   \
  X(Div, m.Div(a, b))                   \
  X(Pow, m.Pow(a, b))                   \
  X(Maximum, m.Max(a, b))               \
  X(Minimum, m.Min(a, b))

#define SJ_COMPARE_SCALAR_DEFS(X) \
  X(Eq, m.Eq(a, b))               \
  X(Ne, m.Ne(a, b))               \
  X(Lt, m.Lt(a, b))               \
  X(Le, m.Le(a, b))               \
  X(Gt, m.Gt(a, b))               \
  X(Ge, m.Ge(a, b))

// In-place updates: self `s` with operands a, b and scalar attributes
// alpha/value (from the node's attrs, passed as backend constants).
#define SJ_UPDATE_SCALAR_DEFS(X)                       \
  X(AddInplace, m.Add(s, m.Mul(alpha, a)))             \
  X(MulInplace, m.Mul(s, a))                           \
  X(AddcmulInplace, m.Add(s, m.Mul(value, m.Mul(a, b)))) \
  X(AddcdivInplace, m.Add(s, m.Mul(value, m.Div(a, b)))) \
  X(LerpInplace, m.Add(s, m.Mul(b, m.Sub(a, s))))      \
  X(CopyInplace, a)                                    \
  X(FillInplace, value)

template <OpId op>
struct ScalarDef;

#define SJ_DEFINE_UNARY(e, expr)                          \
  template <>                                             \
  struct ScalarDef<OpId::k##e> {                          \
    template <class M>                                    \
    static typename M::V Apply(M& m, typename M::V x) {   \
      return expr;                                        \
    }                                                     \
  };
#define SJ_DEFINE_BINARY(e, expr)                                          \
  template <>                                                              \
  struct ScalarDef<OpId::k##e> {                                           \
    template <class M>                                                     \
    static auto Apply(M& m, typename M::V a, typename M::V b) {            \
      return expr;                                                         \
    }                                                                      \
  };
#define SJ_DEFINE_UPDATE(e, expr)                                            \
  template <>                                                                \
  struct ScalarDef<OpId::k##e> {                                             \
    template <class M>                                                       \
    static typename M::V Apply(M& m, typename M::V s, typename M::V a,       \
                               typename M::V b, typename M::V alpha,         \
                               typename M::V value) {                        \
      return expr;                                                           \
    }                                                                        \
  };
SJ_UNARY_SCALAR_DEFS(SJ_DEFINE_UNARY)
SJ_BINARY_SCALAR_DEFS(SJ_DEFINE_BINARY)
SJ_COMPARE_SCALAR_DEFS(SJ_DEFINE_BINARY)
SJ_UPDATE_SCALAR_DEFS(SJ_DEFINE_UPDATE)
#undef SJ_DEFINE_UNARY
#undef SJ_DEFINE_BINARY
#undef SJ_DEFINE_UPDATE

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_SCALAR_DEF_H_
