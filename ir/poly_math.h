// Branch-free exp, log, tanh and erf over a math backend, shared by the eager
// kernels (ir/host_math.h) and the generated CPU code
// (codegen/cpu/llvm_math.h).
//
// A libm call in a loop body stops LLVM's loop vectorizer, so these are
// straight-line arithmetic, integer operations on the float's bits and
// selects: a range reduction, a minimax polynomial (scripts/fit_poly_math.py
// fits them; the literals are the rounded coefficients), and selects for the
// special values. The backends evaluate the same IEEE operations in the same
// order, rounding to nearest and never fusing a multiply and an add, so eager
// and generated results are the same bits.
//
// Accuracy against the correctly rounded value (tests/codegen/poly_math_test.cc
// measures it through generated kernels): exp, log, tanh and erf within 2 ulp
// in f32 (subnormal results in ulps of the subnormal spacing); exp, log, tanh
// within 2 ulp in f64. erf has no f64 polynomial here: backends call libm's.
//
// Besides scalar_def.h's primitives, a backend provides IsDouble();
// Choose(c, then, otherwise), the value of then() where c holds and of
// otherwise() elsewhere (a vector backend computes both and selects, a
// scalar one calls only the function it needs); and, for an integer type I
// of the float's width: Bits(V) -> I and FromBits(I) -> V (bit casts),
// IConst, IAdd, ISub, IAnd (two's complement, wrapping), IShl/IShrA by a
// constant (arithmetic right shift) and IToF (I to V).
#ifndef STEPJIT_IR_POLY_MATH_H_
#define STEPJIT_IR_POLY_MATH_H_

#include <cstddef>
#include <cstdint>
#include <limits>

namespace stepjit::ir {
namespace poly_math {

// The polynomials, as scripts/fit_poly_math.py prints them.
constexpr double kExpF32[] = {0x1p-1,        0x1.555556p-3,  0x1.5554eap-5,
                              0x1.11114cp-7, 0x1.6d42f6p-10, 0x1.a072cep-13};
constexpr double kExpF64[] = {0x1p-1,
                              0x1.5555555555557p-3,
                              0x1.555555555554ep-5,
                              0x1.11111111100e5p-7,
                              0x1.6c16c16c1a093p-10,
                              0x1.a01a01abe438dp-13,
                              0x1.a01a01905b256p-16,
                              0x1.71de023ab15d3p-19,
                              0x1.27e510e113eb7p-22,
                              0x1.af4ddb268139bp-26,
                              0x1.1f19fa6c26138p-29};
constexpr double kLogF32[] = {0x1.55555cp-1, 0x1.997c26p-2, 0x1.2ee78ap-2};
constexpr double kLogF64[] = {0x1.5555555555558p-1, 0x1.99999999952a7p-2,
                              0x1.2492492df708p-2,  0x1.c71c62defbb86p-3,
                              0x1.7462b6569cb8dp-3, 0x1.39fe2def09fa6p-3,
                              0x1.2b5a8681782d5p-3};
constexpr double kTanhF32[] = {-0x1.555556p-2, 0x1.1110dp-3,   -0x1.ba054p-5,
                               0x1.64dd4ep-6,  -0x1.16d312p-7, 0x1.72f01ep-9,
                               -0x1.21b944p-11};
constexpr double kTanhF64[] = {
    -0x1.5555555555555p-2,  0x1.111111111110dp-3,   -0x1.ba1ba1ba1b072p-5,
    0x1.664f48827c2dfp-6,   -0x1.226e354e756aap-7,  0x1.d6d3cc7815449p-9,
    -0x1.7da2ffe8d082cp-10, 0x1.35522285a5a8ep-11,  -0x1.f4feac4b6f0f6p-13,
    0x1.92dd61dcc668ap-14,  -0x1.373110f134daap-15, 0x1.9a373f97f5edbp-17,
    -0x1.48381f002ba7dp-19};
constexpr double kErfSmallF32[] = {
    0x1.06eba8p-3, -0x1.812744p-2, 0x1.ce2e3p-4,  -0x1.b811c2p-6,
    0x1.54e652p-8, -0x1.ab48ep-11, 0x1.603abep-14};
constexpr double kErfLargeF32[] = {
    -0x1.a60826p0, -0x1.41068ep1,  -0x1.aa7d7cp-1, -0x1.6f36fcp-5,
    0x1.63ab28p-7, -0x1.192e3cp-9, 0x1.394944p-12, -0x1.63695cp-16};

// ln2 = hi + lo, hi short enough that k * hi is exact for every exponent k
// the reductions meet (|k| < 2^8 in f32, < 2^11 in f64).
constexpr double kLn2HiF32 = 0x1.62e4p-1, kLn2LoF32 = 0x1.7f7d1cp-20;
constexpr double kLn2HiF64 = 0x1.62e42feep-1, kLn2LoF64 = 0x1.a39ef35793c76p-33;

// Where tanh and erf leave the polynomial around 0 for their exp form.
constexpr double kTanhSmallF32 = 0.875, kTanhSmallF64 = 0.625;
constexpr double kErfSmall = 0.921875;

// c[K] + t (c[K + 1] + t (...)), unrolled at compile time so that a C++
// compiler sees straight-line code it can vectorize, as LLVM does.
template <size_t K = 0, class M, size_t N>
typename M::V Horner(M& m, typename M::V t, const double (&c)[N]) {
  if constexpr (K + 1 == N) {
    return m.Const(c[K]);
  } else {
    return m.Add(m.Mul(Horner<K + 1>(m, t, c), t), m.Const(c[K]));
  }
}

template <class M, size_t F, size_t D>
typename M::V Poly(M& m, typename M::V t, const double (&f32)[F],
                   const double (&f64)[D]) {
  return m.IsDouble() ? Horner(m, t, f64) : Horner(m, t, f32);
}

}  // namespace poly_math

// exp(x) = 2^n exp(r), n = round(x / ln2), |r| <= ln2/2.
template <class M>
typename M::V PolyExp(M& m, typename M::V x) {
  using namespace poly_math;
  const bool d = m.IsDouble();
  const int mantissa = d ? 52 : 23;
  // Beyond these exp overflows, or is under half the smallest subnormal;
  // clamping keeps n small. Max and Min let NaN through.
  x = m.Min(m.Max(x, m.Const(d ? -746 : -104)), m.Const(d ? 710 : 89));
  // Adding 1.5 * 2^mantissa rounds x/ln2 to the integer n, which is then the
  // low bits of the sum's significand.
  const typename M::V magic = m.Const(d ? 0x1.8p52 : 0x1.8p23);
  const typename M::V t =
      m.Add(m.Mul(x, m.Const(1.4426950408889634074)), magic);
  const typename M::V n = m.Sub(t, magic);
  const auto ni = m.ISub(m.Bits(t), m.Bits(magic));
  // x - n*hi is exact (Sterbenz), so r carries only the rounding of n*lo.
  const typename M::V r =
      m.Sub(m.Sub(x, m.Mul(n, m.Const(d ? kLn2HiF64 : kLn2HiF32))),
            m.Mul(n, m.Const(d ? kLn2LoF64 : kLn2LoF32)));
  const typename M::V p = m.Add(
      m.Const(1), m.Add(r, m.Mul(m.Mul(r, r), Poly(m, r, kExpF32, kExpF64))));
  // 2^n as 2^n1 * 2^n2, both normal for every n here: a result that
  // overflows or is subnormal is rounded once, by the last multiply.
  const auto n1 = m.IShrA(ni, 1);
  const auto n2 = m.ISub(ni, n1);
  const auto bias = m.IConst(d ? 1023 : 127);
  const typename M::V s1 = m.FromBits(m.IShl(m.IAdd(n1, bias), mantissa));
  const typename M::V s2 = m.FromBits(m.IShl(m.IAdd(n2, bias), mantissa));
  return m.Mul(m.Mul(p, s1), s2);
}

// log(x) = k ln2 + log1p(f), x = 2^k (1 + f), 1 + f in [sqrt(1/2), sqrt(2)).
template <class M>
typename M::V PolyLog(M& m, typename M::V x) {
  using namespace poly_math;
  using Limits = std::numeric_limits<double>;
  const bool d = m.IsDouble();
  const int mantissa = d ? 52 : 23;
  // Subnormals are scaled into the normal range first.
  const auto tiny = m.Lt(x, m.Const(d ? 0x1p-1022 : 0x1p-126));
  const typename M::V xs =
      m.Select(tiny, m.Mul(x, m.Const(d ? 0x1p54 : 0x1p24)), x);
  // Subtracting the bits of sqrt(1/2) moves the binade boundary there: the
  // exponent field of the difference is k, its significand field 1 + f's.
  const auto sqrt_half = m.Bits(m.Const(0.70710678118654752440));
  const auto i = m.ISub(m.Bits(xs), sqrt_half);
  const auto frac_mask =
      m.IConst(d ? (int64_t{1} << 52) - 1 : (int64_t{1} << 23) - 1);
  const typename M::V f =
      m.Sub(m.FromBits(m.IAdd(m.IAnd(i, frac_mask), sqrt_half)), m.Const(1));
  const typename M::V k =
      m.Add(m.IToF(m.IShrA(i, mantissa)),
            m.Select(tiny, m.Const(d ? -54 : -24), m.Const(0)));
  // log1p(f) = 2s + s R with s = f / (2 + f), R = z P(z), z = s^2; written as
  // f - (hf - s (hf + R)), hf = f^2 / 2, so that f itself is never rounded.
  const typename M::V s = m.Div(f, m.Add(m.Const(2), f));
  const typename M::V z = m.Mul(s, s);
  const typename M::V big_r = m.Mul(z, Poly(m, z, kLogF32, kLogF64));
  const typename M::V hf = m.Mul(m.Const(0.5), m.Mul(f, f));
  const typename M::V lo = m.Add(m.Mul(s, m.Add(hf, big_r)),
                                 m.Mul(k, m.Const(d ? kLn2LoF64 : kLn2LoF32)));
  typename M::V y = m.Add(m.Mul(k, m.Const(d ? kLn2HiF64 : kLn2HiF32)),
                          m.Sub(f, m.Sub(hf, lo)));
  y = m.Select(m.Eq(x, m.Const(Limits::infinity())), x, y);
  y = m.Select(m.Lt(x, m.Const(0)), m.Const(Limits::quiet_NaN()), y);
  y = m.Select(m.Eq(x, m.Const(0)), m.Const(-Limits::infinity()), y);
  return m.Select(m.Ne(x, x), x, y);
}

// tanh(x): an odd polynomial near 0, else sign(x) (1 - 2 / (exp(2|x|) + 1)),
// which is exactly +-1 once exp(2|x|) is large.
template <class M>
typename M::V PolyTanh(M& m, typename M::V x) {
  using namespace poly_math;
  const typename M::V a = m.Abs(x);
  const typename M::V small =
      m.Const(m.IsDouble() ? kTanhSmallF64 : kTanhSmallF32);
  return m.Choose(
      m.Lt(a, small),
      [&] {
        const typename M::V u = m.Mul(x, x);
        const typename M::V p = Poly(m, u, kTanhF32, kTanhF64);
        // x + x u P(u) is +0 at x = -0 (P(0) < 0), hence the select.
        return m.Select(m.Eq(x, m.Const(0)), x,
                        m.Add(x, m.Mul(x, m.Mul(u, p))));
      },
      [&] {
        const typename M::V e = PolyExp(m, m.Add(a, a));
        const typename M::V far =
            m.Sub(m.Const(1), m.Div(m.Const(2), m.Add(e, m.Const(1))));
        return m.Select(m.Lt(x, m.Const(0)), m.Neg(far), far);
      });
}

// erf(x) in f32: an odd polynomial near 0, else sign(x) (1 - erfc(|x|)) with
// log(erfc) a polynomial; |x| is clamped at 4, where erfc < 2^-25 and the
// result rounds to +-1.
template <class M>
typename M::V PolyErfF32(M& m, typename M::V x) {
  using namespace poly_math;
  const typename M::V a = m.Abs(x);
  return m.Choose(
      m.Lt(a, m.Const(kErfSmall)),
      [&] { return m.Add(x, m.Mul(x, Horner(m, m.Mul(x, x), kErfSmallF32))); },
      [&] {
        const typename M::V t = m.Sub(m.Min(a, m.Const(4)), m.Const(kErfSmall));
        const typename M::V far =
            m.Sub(m.Const(1), PolyExp(m, Horner(m, t, kErfLargeF32)));
        return m.Select(m.Lt(x, m.Const(0)), m.Neg(far), far);
      });
}

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_POLY_MATH_H_
