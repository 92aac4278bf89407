// Tests the forward values of every op in ir/ops.def against float64 reference
// loops written here (never against the library itself): dtypes, NumPy
// broadcasting, non-contiguous inputs, sizes large enough for the threaded
// kernels, storage sharing of views, version counters and user errors.
//
// Tolerances, as |got - want| <= atol + rtol * |want| for the output dtype:
//   f64  rtol 1e-12, atol 1e-14  (a few ulps of double)
//   f32  rtol 1e-5 (3e-5 for transcendental functions), atol 1e-6
//   f16  rtol 1e-3, atol 1e-5    (one rounding to 11 significant bits: 4.9e-4)
//   bf16 rtol 1e-2, atol 1e-4    (one rounding to 8 significant bits: 3.9e-3)
// Low-precision inputs are read back bit-exactly before the reference runs,
// so the tolerance only has to cover the kernel's arithmetic and the final
// rounding. Matmul scales the tolerance by sum_k |a_ik * b_kj| instead.
#include "runtime/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numbers>
#include <ostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/dtype.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/generator.h"
#include "runtime/matmul_plan.h"
#include "runtime/tensor.h"
#include "tests/util/expect_error.h"

namespace stepjit {
namespace ir {
// Readable test-parameter names in gtest messages (internal linkage: every
// test file may have its own).
[[maybe_unused]] static void PrintTo(DType t, std::ostream* os) {
  *os << DTypeName(t);
}
}  // namespace ir
namespace {

using ::testing::HasSubstr;
using Values = std::vector<double>;
using Dims = std::vector<int64_t>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const DType kFloatTypes[] = {DType::kF32, DType::kF64, DType::kF16,
                             DType::kBF16};
const DType kAllTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                           DType::kI64, DType::kI32, DType::kBool};

std::string Name(DType t) { return std::string(ir::DTypeName(t)); }

// ---------------------------------------------------------------------------
// Independent encodings of the stored formats (not the library's
// Half/BFloat16).

// Rounds x to `mant` fraction bits, ties to even, with exponents clamped below
// at `min_exp` (gradual underflow); beyond `max_finite` it overflows to inf.
double RoundToFormat(double x, int mant, int min_exp, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double a = std::fabs(x);
  int e;
  std::frexp(a, &e);  // a = f * 2^e with f in [0.5, 1)
  const int exp = std::max(e - 1, min_exp);
  const double r =
      std::ldexp(std::nearbyint(std::ldexp(a, mant - exp)), exp - mant);
  return std::copysign(r > max_finite ? kInf : r, x);
}
double RoundHalf(double x) { return RoundToFormat(x, 10, -14, 65504.0); }
double RoundBF16(double x) {
  return RoundToFormat(x, 7, -126, 3.3895313892515355e38);
}

// The value `v` has once stored in `t` (C++ conversion rules for integers).
double RoundTo(double v, DType t) {
  switch (t) {
    case DType::kF32:
      return static_cast<float>(v);
    case DType::kF64:
      return v;
    case DType::kF16:
      return RoundHalf(v);
    case DType::kBF16:
      return RoundBF16(v);
    case DType::kI64:
      return static_cast<double>(static_cast<int64_t>(v));
    case DType::kI32:
      return static_cast<double>(static_cast<int32_t>(v));
    case DType::kBool:
      return v != 0 ? 1.0 : 0.0;
  }
  return v;
}

uint16_t HalfBits(double x) {  // x is already a binary16 value
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | 0x7c00;
  if (a < std::ldexp(1.0, -14))
    return sign | static_cast<uint16_t>(std::ldexp(a, 24));
  int e;
  const double f = std::frexp(a, &e);
  return sign | static_cast<uint16_t>((e - 1 + 15) << 10) |
         static_cast<uint16_t>(std::ldexp(f, 11) - 1024);
}
double HalfValue(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double v = e == 0    ? std::ldexp(m, -24)
                   : e == 31 ? (m ? kNaN : kInf)
                             : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}
uint16_t BF16Bits(double x) {  // x is already a bfloat16 value
  if (std::isnan(x)) return 0x7fc0;
  const float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
double BF16Value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void Encode(char* p, double v, DType t) {
  v = RoundTo(v, t);
  switch (t) {
    case DType::kF32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::kF64:
      std::memcpy(p, &v, 8);
      break;
    case DType::kF16: {
      uint16_t h = HalfBits(v);
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::kBF16: {
      uint16_t h = BF16Bits(v);
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::kI64: {
      int64_t i = static_cast<int64_t>(v);
      std::memcpy(p, &i, 8);
      break;
    }
    case DType::kI32: {
      int32_t i = static_cast<int32_t>(v);
      std::memcpy(p, &i, 4);
      break;
    }
    case DType::kBool: {
      bool b = v != 0;
      std::memcpy(p, &b, 1);
      break;
    }
  }
}
double Decode(const char* p, DType t) {
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return HalfValue(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return BF16Value(h);
    }
    case DType::kI64: {
      int64_t i;
      std::memcpy(&i, p, 8);
      return static_cast<double>(i);
    }
    case DType::kI32: {
      int32_t i;
      std::memcpy(&i, p, 4);
      return i;
    }
    case DType::kBool: {
      uint8_t b;
      std::memcpy(&b, p, 1);
      return b != 0 ? 1.0 : 0.0;
    }
  }
  return kNaN;
}

int64_t Numel(const Dims& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
Dims ShapeOf(const Tensor& t) {
  return Dims(t.shape().begin(), t.shape().end());
}

// A fresh contiguous tensor holding `v` rounded to `t`, written byte by byte.
Tensor Make(const Values& v, const Dims& shape, DType t = DType::kF32) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), Numel(shape));
  Tensor out = empty(shape, {.dtype = t});
  char* p = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < v.size(); ++i)
    Encode(p + i * out.element_size(), v[i], t);
  return out;
}

// The elements of any strided view in row-major order, decoded to double.
Values Read(const Tensor& t) {
  const int64_t n = t.numel();
  Values out(n);
  const char* base = static_cast<const char*>(t.storage()->data());
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = t.offset();
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      off += (rem % t.shape()[d]) * t.strides()[d];
      rem /= t.shape()[d];
    }
    out[i] = Decode(base + off * t.element_size(), t.dtype());
  }
  return out;
}

Values Uniform(int64_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Values v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
Tensor RandomTensor(const Dims& shape, DType t, double lo, double hi,
                    uint64_t seed) {
  return Make(Uniform(Numel(shape), lo, hi, seed), shape, t);
}

Dims Unravel(int64_t i, const Dims& shape) {
  Dims idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}
// Row-major index into `in` (right-aligned, size-1 dims broadcast) of the
// element that output multi-index `idx` reads.
int64_t BroadcastIndex(const Dims& idx, const Dims& in) {
  const size_t lead = idx.size() - in.size();
  int64_t lin = 0;
  for (size_t d = 0; d < in.size(); ++d)
    lin = lin * in[d] + (in[d] == 1 ? 0 : idx[lead + d]);
  return lin;
}
Dims BroadcastShape(const Dims& a, const Dims& b) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

struct Tol {
  double rtol, atol;
};
Tol TolFor(DType t, bool transcendental = false) {
  switch (t) {
    case DType::kF64:
      return {1e-12, 1e-14};
    case DType::kF32:
      return {transcendental ? 3e-5 : 1e-5, 1e-6};
    case DType::kF16:
      return {1e-3, 1e-5};
    case DType::kBF16:
      return {1e-2, 1e-4};
    default:
      return {0, 0};  // integers and bools are exact
  }
}

bool Close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

::testing::AssertionResult AllClose(const Values& got, const Values& want,
                                    Tol tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << " vs " << want.size();
  }
  int64_t bad = 0;
  std::ostringstream os;
  os.precision(17);
  for (size_t i = 0; i < got.size(); ++i) {
    if (Close(got[i], want[i], tol.rtol, tol.atol)) continue;
    if (bad++ < 6)
      os << "\n  [" << i << "] got " << got[i] << " want " << want[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements differ (rtol " << tol.rtol
         << ", atol " << tol.atol << "):" << os.str();
}

using test::ExpectError;

// ---------------------------------------------------------------------------
// Unary elementwise.

struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double (*ref)(double);
  double lo, hi;
  bool transcendental;
};

double RefGelu(double x) {
  return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
}
double RefGeluTanh(double x) {
  return 0.5 * x *
         (1 + std::tanh(std::sqrt(2 / std::numbers::pi) *
                        (x + 0.044715 * x * x * x)));
}

const UnaryCase kUnaryCases[] = {
    {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; },
     -3, 3, false},
    {"abs", [](const Tensor& x) { return abs(x); },
     [](double x) { return std::fabs(x); }, -3, 3, false},
    {"sign", [](const Tensor& x) { return sign(x); },
     [](double x) { return static_cast<double>((x > 0) - (x < 0)); }, -3, 3,
     false},
    {"exp", [](const Tensor& x) { return exp(x); },
     [](double x) { return std::exp(x); }, -4, 4, true},
    {"log", [](const Tensor& x) { return log(x); },
     [](double x) { return std::log(x); }, 0.05, 5, true},
    {"sqrt", [](const Tensor& x) { return sqrt(x); },
     [](double x) { return std::sqrt(x); }, 0, 5, true},
    {"rsqrt", [](const Tensor& x) { return rsqrt(x); },
     [](double x) { return 1 / std::sqrt(x); }, 0.05, 5, true},
    {"reciprocal", [](const Tensor& x) { return reciprocal(x); },
     [](double x) { return 1 / x; }, 0.2, 4, false},
    {"tanh", [](const Tensor& x) { return tanh(x); },
     [](double x) { return std::tanh(x); }, -3, 3, true},
    {"erf", [](const Tensor& x) { return erf(x); },
     [](double x) { return std::erf(x); }, -3, 3, true},
    {"sigmoid", [](const Tensor& x) { return sigmoid(x); },
     [](double x) { return 1 / (1 + std::exp(-x)); }, -6, 6, true},
    {"relu", [](const Tensor& x) { return relu(x); },
     [](double x) { return x > 0 ? x : 0.0; }, -3, 3, false},
    {"gelu", [](const Tensor& x) { return gelu(x); }, RefGelu, -4, 4, true},
    {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, RefGeluTanh,
     -4, 4, true},
    {"silu", [](const Tensor& x) { return silu(x); },
     [](double x) { return x / (1 + std::exp(-x)); }, -6, 6, true},
    {"sin", [](const Tensor& x) { return sin(x); },
     [](double x) { return std::sin(x); }, -6, 6, true},
    {"cos", [](const Tensor& x) { return cos(x); },
     [](double x) { return std::cos(x); }, -6, 6, true},
};

void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.name; }

class UnaryOpTest
    : public ::testing::TestWithParam<std::tuple<UnaryCase, DType>> {};

TEST_P(UnaryOpTest, MatchesReferenceOnContiguousAndTransposedInput) {
  const auto& [c, dt] = GetParam();
  const Tensor base = RandomTensor({6, 10}, dt, c.lo, c.hi, 17);
  for (const Tensor& x : {base, base.t(), base.slice(1, 1, 10, 3)}) {
    const Values in = Read(x);
    Values want(in.size());
    for (size_t i = 0; i < in.size(); ++i) want[i] = c.ref(in[i]);
    const Tensor y = c.fn(x);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(ShapeOf(y), ShapeOf(x));
    EXPECT_TRUE(AllClose(Read(y), want, TolFor(dt, c.transcendental)))
        << c.name << " on " << Name(dt) << ir::ShapeToString(x.shape())
        << (x.is_contiguous() ? "" : " (non-contiguous)");
  }
}

INSTANTIATE_TEST_SUITE_P(AllUnaryOps, UnaryOpTest,
                         ::testing::Combine(::testing::ValuesIn(kUnaryCases),
                                            ::testing::ValuesIn(kFloatTypes)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  "_" + Name(std::get<1>(info.param));
                         });

TEST(UnaryOpValuesTest, SpecialValues) {
  const Tensor x = Make({-kInf, -2, -0.0, 0, 0.5, kInf, kNaN}, {7});
  EXPECT_TRUE(
      AllClose(Read(neg(x)), {kInf, 2, 0, 0, -0.5, -kInf, kNaN}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(abs(x)), {kInf, 2, 0, 0, 0.5, kInf, kNaN}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(exp(x)),
                       {0, std::exp(-2.0), 1, 1, std::exp(0.5), kInf, kNaN},
                       TolFor(DType::kF32, true)));
  EXPECT_TRUE(AllClose(Read(log(x)),
                       {kNaN, kNaN, -kInf, -kInf, std::log(0.5), kInf, kNaN},
                       TolFor(DType::kF32, true)));
  EXPECT_TRUE(AllClose(Read(sqrt(x)),
                       {kNaN, kNaN, 0, 0, std::sqrt(0.5), kInf, kNaN},
                       TolFor(DType::kF32, true)));
  EXPECT_TRUE(AllClose(Read(reciprocal(x)), {0, -0.5, -kInf, kInf, 2, 0, kNaN},
                       {0, 0}));
  EXPECT_TRUE(AllClose(Read(tanh(x)),
                       {-1, std::tanh(-2.0), 0, 0, std::tanh(0.5), 1, kNaN},
                       TolFor(DType::kF32, true)));
  EXPECT_TRUE(
      AllClose(Read(erf(x)),
               {-1, -0.9953222650189527, 0, 0, 0.5204998778130465, 1, kNaN},
               TolFor(DType::kF32, true)));
  EXPECT_TRUE(
      AllClose(Read(sigmoid(x)),
               {0, 0.11920292202211755, 0.5, 0.5, 0.6224593312018546, 1, kNaN},
               TolFor(DType::kF32, true)));
  // sign(+-0) is 0; NaN is left out (PyTorch and NumPy disagree on it).
  EXPECT_TRUE(
      AllClose(Read(sign(x.slice(0, 0, 6))), {-1, -1, 0, 0, 1, 1}, {0, 0}));
  // gelu(1) = Phi(1); gelu(-inf) is left out (0 * inf in PyTorch's formula
  // too).
  EXPECT_TRUE(AllClose(Read(gelu(Make({0, 1, -1, kInf}, {4}))),
                       {0, 0.8413447460685429, -0.15865525393145707, kInf},
                       TolFor(DType::kF32, true)));
}

TEST(UnaryOpValuesTest, ReluOfNegativesIsZeroAndNaNPropagates) {
  const Tensor x = Make({-3, -1e-30, -0.0, 0, 2, kNaN}, {6});
  const Values y = Read(relu(x));
  EXPECT_TRUE(AllClose(y, {0, 0, 0, 0, 2, kNaN}, {0, 0}));
}

// relu(-inf) must be 0 (PyTorch's clamp_min(0)), not -inf * 0 = NaN.
TEST(UnaryOpValuesTest, ReluOfNegativeInfinityIsZero) {
  EXPECT_TRUE(AllClose(Read(relu(Make({-kInf}, {1}))), {0}, {0, 0}));
}

TEST(UnaryOpValuesTest, IntegerInputs) {
  const Tensor i = Make({-3, 0, 2, 7}, {4}, DType::kI64);
  EXPECT_EQ(neg(i).dtype(), DType::kI64);
  EXPECT_TRUE(AllClose(Read(neg(i)), {3, 0, -2, -7}, {0, 0}));
  EXPECT_EQ(abs(Make({-3, 4}, {2}, DType::kI32)).dtype(), DType::kI32);
  EXPECT_TRUE(
      AllClose(Read(abs(Make({-3, 4}, {2}, DType::kI32))), {3, 4}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(sign(i)), {-1, 0, 1, 1}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(relu(i)), {0, 0, 2, 7}, {0, 0}));
  // Floating unary functions of integers compute in f32.
  const Tensor e = exp(i);
  EXPECT_EQ(e.dtype(), DType::kF32);
  EXPECT_TRUE(AllClose(Read(e),
                       {std::exp(-3.0), 1, std::exp(2.0), std::exp(7.0)},
                       TolFor(DType::kF32, true)));
  EXPECT_EQ(sqrt(Make({4, 9}, {2}, DType::kI32)).dtype(), DType::kF32);
}

// ---------------------------------------------------------------------------
// Binary elementwise with broadcasting.

struct BinaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  double (*ref)(double, double);
  double alo, ahi, blo, bhi;
  bool transcendental;
};

const BinaryCase kBinaryCases[] = {
    {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); },
     [](double a, double b) { return a + b; }, -2, 2, -2, 2, false},
    {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
     [](double a, double b) { return a - b; }, -2, 2, -2, 2, false},
    {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
     [](double a, double b) { return a * b; }, -2, 2, -2, 2, false},
    {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); },
     [](double a, double b) { return a / b; }, -2, 2, 0.5, 2.5, false},
    {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
     [](double a, double b) { return std::pow(a, b); }, 0.5, 2, -2, 2, true},
    {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
     [](double a, double b) { return std::max(a, b); }, -2, 2, -2, 2, false},
    {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
     [](double a, double b) { return std::min(a, b); }, -2, 2, -2, 2, false},
};

void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.name; }

// Compares c.fn(a, b) with the broadcast reference; the result dtype is `dt`.
void CheckBinary(const BinaryCase& c, const Tensor& a, const Tensor& b,
                 DType dt) {
  const Values va = Read(a), vb = Read(b);
  const Dims sa = ShapeOf(a), sb = ShapeOf(b), so = BroadcastShape(sa, sb);
  const Tensor out = c.fn(a, b);
  EXPECT_EQ(out.dtype(), dt);
  EXPECT_EQ(ShapeOf(out), so);
  Values want(Numel(so));
  for (int64_t i = 0; i < Numel(so); ++i) {
    const Dims idx = Unravel(i, so);
    want[i] = c.ref(va[BroadcastIndex(idx, sa)], vb[BroadcastIndex(idx, sb)]);
  }
  EXPECT_TRUE(AllClose(Read(out), want, TolFor(dt, c.transcendental)))
      << c.name << " " << Name(a.dtype()) << ir::ShapeToString(a.shape())
      << " with " << Name(b.dtype()) << ir::ShapeToString(b.shape());
}

class BinaryOpTest
    : public ::testing::TestWithParam<std::tuple<BinaryCase, DType>> {};

TEST_P(BinaryOpTest, BroadcastsLikeNumPy) {
  const auto& [c, dt] = GetParam();
  const Tensor a = RandomTensor({2, 1, 4}, dt, c.alo, c.ahi, 1);
  const Tensor b = RandomTensor({3, 1}, dt, c.blo, c.bhi, 2);
  CheckBinary(c, a, b, dt);  // -> [2, 3, 4]
  CheckBinary(c, RandomTensor({3, 1}, dt, c.alo, c.ahi, 3),
              RandomTensor({2, 1, 4}, dt, c.blo, c.bhi, 4), dt);
  CheckBinary(c, RandomTensor({4}, dt, c.alo, c.ahi, 5),
              RandomTensor({3, 1}, dt, c.blo, c.bhi, 6), dt);  // -> [3, 4]
}

TEST_P(BinaryOpTest, ZeroDimOperandOnEitherSide) {
  const auto& [c, dt] = GetParam();
  const Tensor x_a = RandomTensor({3, 4}, dt, c.alo, c.ahi, 7);
  const Tensor x_b = RandomTensor({3, 4}, dt, c.blo, c.bhi, 8);
  CheckBinary(c, x_a, Make({(c.blo + c.bhi) / 2 + 0.125}, {}, dt), dt);
  CheckBinary(c, Make({(c.alo + c.ahi) / 2 + 0.125}, {}, dt), x_b, dt);
  CheckBinary(c, Make({c.ahi}, {}, dt), Make({c.blo + 0.25}, {}, dt),
              dt);  // 0-d result
}

TEST_P(BinaryOpTest, NonContiguousOperands) {
  const auto& [c, dt] = GetParam();
  const Tensor a = RandomTensor({4, 3}, dt, c.alo, c.ahi, 9).t();  // [3, 4]
  const Tensor b =
      RandomTensor({3, 8}, dt, c.blo, c.bhi, 10).slice(1, 1, 8, 2);  // [3, 4]
  ASSERT_FALSE(a.is_contiguous());
  ASSERT_FALSE(b.is_contiguous());
  CheckBinary(c, a, b, dt);
  CheckBinary(c, b.slice(0, 0, 3, 2), a.slice(0, 1, 2),
              dt);  // [2, 4] with [1, 4]
}

INSTANTIATE_TEST_SUITE_P(AllBinaryOps, BinaryOpTest,
                         ::testing::Combine(::testing::ValuesIn(kBinaryCases),
                                            ::testing::ValuesIn(kFloatTypes)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  "_" + Name(std::get<1>(info.param));
                         });

TEST(BinaryOpValuesTest, TypePromotion) {
  const Tensor f16 = Make({1.5, -2, 3}, {3}, DType::kF16);
  const Tensor bf16 = Make({0.5, 0.25, -1}, {3}, DType::kBF16);
  const Tensor i32 = Make({7, -3, 4}, {3}, DType::kI32);
  const Tensor i64 = Make({2, 2, -3}, {3}, DType::kI64);
  const Tensor f32 = Make({0.5, 1, 2}, {3}, DType::kF32);
  const Tensor f64 = Make({0.25, 0.5, 4}, {3}, DType::kF64);
  const Tensor bools = Make({1, 0, 1}, {3}, DType::kBool);
  const Tensor bools2 = Make({1, 0, 0}, {3}, DType::kBool);

  struct Expect {
    Tensor got;
    DType dtype;
    Values values;
  };
  const Expect cases[] = {
      {add(f16, bf16), DType::kF32, {2, -1.75, 2}},
      {add(i32, i64), DType::kI64, {9, -1, 1}},
      {mul(i32, i32), DType::kI32, {49, 9, 16}},
      {add(f32, f64), DType::kF64, {0.75, 1.5, 6}},
      {add(i32, bools), DType::kI32, {8, -3, 5}},
      {div(i32, i64), DType::kF32, {3.5, -1.5, -4.0 / 3}},
      {pow(i64, i64), DType::kF32, {4, 4, 1.0 / -27}},
      // A 0-d operand of a higher category decides the category only.
      {add(i64, Make({0.5}, {}, DType::kF64)), DType::kF32, {2.5, 2.5, -2.5}},
      {mul(f16, Make({2}, {}, DType::kF64)), DType::kF16, {3, -4, 6}},
      {add(i32, Make({5}, {}, DType::kI64)), DType::kI32, {12, 2, 9}},
      // Double operands (wrapped numbers) do not widen the tensor.
      {i64 * 2.0, DType::kI64, {4, 4, -6}},
      {i64 + 0.5, DType::kF32, {2.5, 2.5, -2.5}},
      {f16 * 3.0, DType::kF16, {4.5, -6, 9}},
      {1.0 - f32, DType::kF32, {0.5, 0, -1}},
      {2.0 / f32, DType::kF32, {4, 2, 1}},
      // bool arithmetic is logical.
      {add(bools, bools2), DType::kBool, {1, 0, 1}},
      {mul(bools, bools2), DType::kBool, {1, 0, 0}},
      {maximum(i32, i64), DType::kI64, {7, 2, 4}},
      {minimum(i32, i64), DType::kI64, {2, -3, -3}},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    EXPECT_EQ(cases[i].got.dtype(), cases[i].dtype) << "case " << i;
    EXPECT_TRUE(
        AllClose(Read(cases[i].got), cases[i].values, TolFor(DType::kF32)))
        << "case " << i;
  }
}

TEST(BinaryOpValuesTest, MaximumAndMinimumPropagateNaN) {
  const Tensor a = Make({kNaN, 1, kNaN, -kInf}, {4});
  const Tensor b = Make({1, kNaN, kNaN, 2}, {4});
  EXPECT_TRUE(AllClose(Read(maximum(a, b)), {kNaN, kNaN, kNaN, 2}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(minimum(a, b)), {kNaN, kNaN, kNaN, -kInf}, {0, 0}));
}

TEST(BinaryOpValuesTest, DivisionByZeroAndNegationOfBool) {
  EXPECT_TRUE(AllClose(Read(div(Make({1, -1, 0}, {3}), Make({0, 0, 0}, {3}))),
                       {kInf, -kInf, kNaN}, {0, 0}));
  ExpectError([] { neg(Make({1, 0}, {2}, DType::kBool)); }, {"neg", "bool"});
}

// ---------------------------------------------------------------------------
// Comparisons and where.

struct CompareCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  bool (*ref)(double, double);
};
const CompareCase kCompareCases[] = {
    {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); },
     [](double a, double b) { return a == b; }},
    {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); },
     [](double a, double b) { return a != b; }},
    {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); },
     [](double a, double b) { return a < b; }},
    {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); },
     [](double a, double b) { return a <= b; }},
    {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); },
     [](double a, double b) { return a > b; }},
    {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); },
     [](double a, double b) { return a >= b; }},
};

void PrintTo(const CompareCase& c, std::ostream* os) { *os << c.name; }

class CompareOpTest : public ::testing::TestWithParam<CompareCase> {};

void CheckCompare(const CompareCase& c, const Tensor& a, const Tensor& b) {
  const Values va = Read(a), vb = Read(b);
  const Dims sa = ShapeOf(a), sb = ShapeOf(b), so = BroadcastShape(sa, sb);
  const Tensor out = c.fn(a, b);
  EXPECT_EQ(out.dtype(), DType::kBool);
  EXPECT_EQ(ShapeOf(out), so);
  Values want(Numel(so));
  for (int64_t i = 0; i < Numel(so); ++i) {
    const Dims idx = Unravel(i, so);
    want[i] =
        c.ref(va[BroadcastIndex(idx, sa)], vb[BroadcastIndex(idx, sb)]) ? 1 : 0;
  }
  EXPECT_TRUE(AllClose(Read(out), want, {0, 0}))
      << c.name << " " << Name(a.dtype()) << " vs " << Name(b.dtype());
}

TEST_P(CompareOpTest, BoolResultWithBroadcastingAndMixedDtypes) {
  const CompareCase& c = GetParam();
  // Small integer-valued data so that equal pairs occur.
  const Values av = {-1, 0, 1, 2, 2, 1, 0, -1};
  const Tensor a = Make(av, {2, 1, 4}, DType::kF32);
  const Tensor b = Make({-1, 0.5, 2}, {3, 1}, DType::kF32);
  CheckCompare(c, a, b);
  CheckCompare(c, a, Make({-1, 1, 2}, {3, 1}, DType::kI64));  // promotes to f32
  CheckCompare(c, Make(av, {2, 4}, DType::kF16), Make({1}, {}, DType::kF64));
  CheckCompare(c, Make(av, {2, 4}, DType::kBF16).t(),
               Make({0, 2}, {2}, DType::kI32));
  Values av2;
  for (double v : av) av2.insert(av2.end(), {v, 9});
  CheckCompare(c, Make(av, {8}, DType::kI32),
               Make(av2, {16}, DType::kI64).slice(0, 0, 16, 2));
  // NaN compares unequal to everything, itself included.
  CheckCompare(c, Make({kNaN, kNaN, 1}, {3}), Make({kNaN, 1, kNaN}, {3}));
}

INSTANTIATE_TEST_SUITE_P(AllCompareOps, CompareOpTest,
                         ::testing::ValuesIn(kCompareCases),
                         [](const auto& info) {
                           return std::string(info.param.name);
                         });

TEST(WhereTest, BroadcastsAllThreeOperandsAndPromotes) {
  const Values cv = {1, 0, 0, 1, 0, 1, 1, 0};
  const Tensor cond = Make(cv, {2, 1, 4}, DType::kBool);
  const Tensor a = Make({10, 20, 30}, {3, 1}, DType::kF32);
  const Tensor b = Make({-0.5}, {}, DType::kF64);
  const Tensor out = where(cond, a, b);
  EXPECT_EQ(out.dtype(), DType::kF32);
  ASSERT_EQ(ShapeOf(out), (Dims{2, 3, 4}));
  Values want(24);
  for (int64_t i = 0; i < 24; ++i) {
    const Dims idx = Unravel(i, {2, 3, 4});
    want[i] = cv[idx[0] * 4 + idx[2]] ? 10.0 * (idx[1] + 1) : -0.5;
  }
  EXPECT_TRUE(AllClose(Read(out), want, {0, 0}));

  // Mixed low-precision operands promote; non-contiguous operands work.
  const Tensor x = RandomTensor({4, 3}, DType::kF16, -2, 2, 3).t();
  const Tensor y = RandomTensor({3, 4}, DType::kF32, -2, 2, 4);
  const Tensor c2 = gt(x, y);
  const Tensor o2 = where(c2, x, y);
  EXPECT_EQ(o2.dtype(), DType::kF32);
  const Values vx = Read(x), vy = Read(y);
  Values want2(12);
  for (int i = 0; i < 12; ++i) want2[i] = std::max(vx[i], vy[i]);
  EXPECT_TRUE(AllClose(Read(o2), want2, {0, 0}));

  ExpectError(
      [&] {
        where(Make({1, 0, 1}, {3}, DType::kF32), a, b);
      },
      {"where", "bool"});
}

// ---------------------------------------------------------------------------
// Casts among every pair of dtypes.

Values CastSourceValues(DType src) {
  if (src == DType::kBool) return {0, 1, 1, 0, 1, 0, 0, 1};
  if (ir::IsIntegral(src))
    return {0, 1, -2, 3, -7, 100, 257, 65504, -100000, 123456789};
  return {0,    1,     -2,   3.5,  -7.25, 100,   0.1,
          1e-3, 257.3, -0.6, 0.99, -1e4,  60000, -0.0};
}

class CastTest : public ::testing::TestWithParam<std::tuple<DType, DType>> {};

TEST_P(CastTest, ConvertsEveryValue) {
  const auto& [src, dst] = GetParam();
  const Values v = CastSourceValues(src);
  const Tensor x = Make(v, {static_cast<int64_t>(v.size())}, src);
  const Values in = Read(x);
  Values want(in.size());
  for (size_t i = 0; i < in.size(); ++i) want[i] = RoundTo(in[i], dst);
  for (const Tensor& y : {cast(x, dst), x.to(dst)}) {
    EXPECT_EQ(y.dtype(), dst);
    EXPECT_EQ(ShapeOf(y), ShapeOf(x));
    EXPECT_TRUE(AllClose(Read(y), want, {0, 0}))
        << Name(src) << " -> " << Name(dst);
  }
  // A strided source.
  const Tensor xs = x.slice(0, 1, x.numel(), 3);
  Values want_s;
  for (int64_t i = 1; i < x.numel(); i += 3)
    want_s.push_back(RoundTo(in[i], dst));
  EXPECT_TRUE(AllClose(Read(cast(xs, dst)), want_s, {0, 0}))
      << Name(src) << " -> " << Name(dst);
}

INSTANTIATE_TEST_SUITE_P(AllPairs, CastTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllTypes)),
                         [](const auto& info) {
                           return Name(std::get<0>(info.param)) + "_to_" +
                                  Name(std::get<1>(info.param));
                         });

TEST(CastValuesTest, HalfRoundsToNearestEvenAndOverflowsToInfinity) {
  const double u = std::ldexp(1.0, -11);  // half an ulp of 1.0 in f16
  const Tensor x =
      Make({1 + u, 1 + 3 * u, 1 + u + std::ldexp(1.0, -20), 65504, 65519, 65520,
            1e5, -1e5, std::ldexp(1.0, -24), std::ldexp(1.0, -25),
            3 * std::ldexp(1.0, -25), 1e-8, kNaN, -kInf},
           {14}, DType::kF32);
  const Tensor h = cast(x, DType::kF16);
  EXPECT_TRUE(
      AllClose(Read(h),
               {1, 1 + 4 * u, 1 + 2 * u, 65504, 65504, kInf, kInf, -kInf,
                std::ldexp(1.0, -24), 0, std::ldexp(1.0, -23), 0, kNaN, -kInf},
               {0, 0}));
  const uint16_t* bits = static_cast<const uint16_t*>(h.data_ptr());
  EXPECT_EQ(bits[0], 0x3c00);  // 1.0
  EXPECT_EQ(bits[3], 0x7bff);  // largest finite
  EXPECT_EQ(bits[5], 0x7c00);  // +inf
  EXPECT_EQ(bits[8], 0x0001);  // smallest subnormal
}

TEST(CastValuesTest, BFloat16RoundsToNearestEven) {
  const double u = std::ldexp(1.0, -8);  // half an ulp of 1.0 in bf16
  const Tensor x =
      Make({1 + u, 1 + 3 * u, 1 + u + std::ldexp(1.0, -20), -3 * u - 1,
            std::numeric_limits<float>::max(), 1e30, kNaN, kInf},
           {8}, DType::kF32);
  const double big = Read(x)[5];  // 1e30 as f32
  EXPECT_TRUE(AllClose(
      Read(cast(x, DType::kBF16)),
      {1, 1 + 4 * u, 1 + 2 * u, -1 - 4 * u, kInf, RoundBF16(big), kNaN, kInf},
      {0, 0}));
  EXPECT_NEAR(RoundBF16(big), 1e30, 1e30 * 4e-3);
}

TEST(CastValuesTest, FloatToIntegerTruncatesTowardZero) {
  const Tensor x = Make({2.7, -2.7, -0.5, 0.5, 1e9}, {5}, DType::kF64);
  EXPECT_TRUE(AllClose(Read(cast(x, DType::kI64)), {2, -2, 0, 0, 1e9}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(cast(x, DType::kI32)), {2, -2, 0, 0, 1e9}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(cast(x, DType::kBool)), {1, 1, 1, 1, 1}, {0, 0}));
  EXPECT_TRUE(
      AllClose(Read(cast(Make({kNaN, 0}, {2}), DType::kBool)), {1, 0}, {0, 0}));
}

// Any nonzero value is true, even doubles below the smallest float
// subnormal (the comparison happens in the source type).
TEST(CastValuesTest, TinyDoubleToBoolIsTrue) {
  const Tensor x = Make({1e-300, -1e-50, 4.9e-324}, {3}, DType::kF64);
  EXPECT_TRUE(AllClose(Read(cast(x, DType::kBool)), {1, 1, 1}, {0, 0}));
}

// ---------------------------------------------------------------------------
// Reductions.

enum class Red { kSum, kMean, kAmax, kVar0, kVar1 };
const char* RedName(Red r) {
  switch (r) {
    case Red::kSum:
      return "sum";
    case Red::kMean:
      return "mean";
    case Red::kAmax:
      return "amax";
    case Red::kVar0:
      return "var_correction0";
    case Red::kVar1:
      return "var_correction1";
  }
  return "?";
}

void PrintTo(Red r, std::ostream* os) { *os << RedName(r); }

Tensor CallReduce(Red r, const Tensor& x, const Dims& dims, bool keepdim) {
  switch (r) {
    case Red::kSum:
      return sum(x, dims, keepdim);
    case Red::kMean:
      return mean(x, dims, keepdim);
    case Red::kAmax:
      return amax(x, dims, keepdim);
    case Red::kVar0:
      return var(x, dims, 0, keepdim);
    case Red::kVar1:
      return var(x, dims, 1, keepdim);
  }
  return Tensor();
}

double RefReduce(Red r, const Values& g) {
  const double n = static_cast<double>(g.size());
  double s = 0;
  for (double v : g) s += v;
  switch (r) {
    case Red::kSum:
      return s;
    case Red::kMean:
      return s / n;
    case Red::kAmax:
      return *std::max_element(g.begin(), g.end());
    case Red::kVar0:
    case Red::kVar1: {
      double ss = 0;
      for (double v : g) ss += (v - s / n) * (v - s / n);
      return ss / (n - (r == Red::kVar1 ? 1 : 0));
    }
  }
  return kNaN;
}

Dims NormalizeDims(const Dims& dims, int64_t rank) {
  Dims out;
  for (int64_t d : dims) out.push_back(d < 0 ? d + rank : d);
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) out.push_back(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Values of `in` (row-major, shape `shape`) grouped per output element, each
// group in row-major order of the reduced dims; also the output shape.
std::vector<Values> Groups(const Values& in, const Dims& shape,
                           const Dims& dims, bool keepdim, Dims* out_shape) {
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t d : dims) reduced[d] = true;
  out_shape->clear();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d])
      out_shape->push_back(shape[d]);
    else if (keepdim)
      out_shape->push_back(1);
  }
  std::map<int64_t, Values> groups;
  for (int64_t i = 0; i < Numel(shape); ++i) {
    const Dims idx = Unravel(i, shape);
    int64_t key = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (!reduced[d]) key = key * shape[d] + idx[d];
    }
    groups[key].push_back(in[i]);
  }
  std::vector<Values> out;
  for (auto& [k, g] : groups) out.push_back(std::move(g));
  return out;
}

// {0} and {0, 1} of a contiguous input take the leading-dims kernel.
const Dims kDimCases[] = {{0},      {1},    {2}, {-1},      {0, 2},
                          {-3, -1}, {1, 2}, {},  {0, 1, 2}, {0, 1}};

std::string DimsString(const Dims& d) {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < d.size(); ++i) os << (i ? "," : "") << d[i];
  os << "}";
  return os.str();
}

// Three [3, 4, 5] inputs: contiguous, a permuted view and a strided slice.
std::vector<Tensor> ReductionInputs(DType dt, double lo, double hi) {
  return {RandomTensor({3, 4, 5}, dt, lo, hi, 21),
          RandomTensor({5, 4, 3}, dt, lo, hi, 22).permute({2, 1, 0}),
          RandomTensor({3, 8, 5}, dt, lo, hi, 23).slice(1, 1, 8, 2)};
}

class ReductionTest : public ::testing::TestWithParam<std::tuple<Red, DType>> {
};

TEST_P(ReductionTest, AnyDimsKeepdimAndLayout) {
  const auto& [r, dt] = GetParam();
  for (const Tensor& x : ReductionInputs(dt, -2, 2)) {
    ASSERT_EQ(ShapeOf(x), (Dims{3, 4, 5}));
    const Values in = Read(x);
    for (const Dims& dims : kDimCases) {
      for (bool keepdim : {false, true}) {
        Dims want_shape;
        const auto groups =
            Groups(in, {3, 4, 5}, NormalizeDims(dims, 3), keepdim, &want_shape);
        Values want;
        for (const auto& g : groups) want.push_back(RefReduce(r, g));
        const Tensor y = CallReduce(r, x, dims, keepdim);
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_EQ(ShapeOf(y), want_shape);
        EXPECT_TRUE(AllClose(Read(y), want, TolFor(dt)))
            << RedName(r) << " " << Name(dt) << " dims " << DimsString(dims)
            << " keepdim " << keepdim
            << (x.is_contiguous() ? "" : " non-contiguous");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllReductions, ReductionTest,
    ::testing::Combine(::testing::Values(Red::kSum, Red::kMean, Red::kAmax,
                                         Red::kVar0, Red::kVar1),
                       ::testing::ValuesIn(kFloatTypes)),
    [](const auto& info) {
      return std::string(RedName(std::get<0>(info.param))) + "_" +
             Name(std::get<1>(info.param));
    });

class ArgmaxTest : public ::testing::TestWithParam<DType> {};

TEST_P(ArgmaxTest, IndexAlongOneDim) {
  const DType dt = GetParam();
  const double range = dt == DType::kI32 ? 1000 : 2;
  for (const Tensor& x : ReductionInputs(dt, -range, range)) {
    const Values in = Read(x);
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      for (bool keepdim : {false, true}) {
        Dims want_shape;
        const auto groups = Groups(in, {3, 4, 5}, NormalizeDims({dim}, 3),
                                   keepdim, &want_shape);
        Values want;
        for (const auto& g : groups) {
          want.push_back(std::max_element(g.begin(), g.end()) -
                         g.begin());  // first max
        }
        const Tensor y = argmax(x, dim, keepdim);
        EXPECT_EQ(y.dtype(), DType::kI64);
        EXPECT_EQ(ShapeOf(y), want_shape);
        EXPECT_TRUE(AllClose(Read(y), want, {0, 0}))
            << Name(dt) << " dim " << dim << " keepdim " << keepdim;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ArgmaxTest,
                         ::testing::Values(DType::kF32, DType::kF64,
                                           DType::kF16, DType::kBF16,
                                           DType::kI32),
                         [](const auto& info) { return Name(info.param); });

TEST(ArgmaxValuesTest, TiesPickTheFirstAndNaNWins) {
  EXPECT_TRUE(AllClose(Read(argmax(Make({1, 3, 3, 2}, {4}), 0)), {1}, {0, 0}));
  EXPECT_TRUE(
      AllClose(Read(argmax(Make({1, kNaN, 3, kNaN}, {4}), 0)), {1}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(amax(Make({1, kNaN, 3}, {3}))), {kNaN}, {0, 0}));
}

TEST(ReductionValuesTest, IntegerAndBoolInputs) {
  const Tensor i = Make({1, -2, 3, 4, 5, -6}, {2, 3}, DType::kI32);
  const Tensor s = sum(i, {1});
  EXPECT_EQ(s.dtype(), DType::kI64);
  EXPECT_TRUE(AllClose(Read(s), {2, 3}, {0, 0}));
  const Tensor b = Make({1, 0, 1, 1, 1, 0}, {2, 3}, DType::kBool);
  EXPECT_EQ(sum(b).dtype(), DType::kI64);
  EXPECT_TRUE(AllClose(Read(sum(b)), {4}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(sum(b, {0})), {2, 1, 1}, {0, 0}));
  EXPECT_EQ(amax(i, {0}).dtype(), DType::kI32);
  EXPECT_TRUE(AllClose(Read(amax(i, {0})), {4, 5, 3}, {0, 0}));
  ExpectError([&] { mean(i); }, {"mean", "floating"});
  ExpectError([&] { var(i); }, {"var", "floating"});
  ExpectError([&] { sum(i, {2}); }, {"sum", "dim 2"});
}

TEST(ReductionValuesTest, EmptyInputs) {
  const Tensor x = zeros({0, 3});
  EXPECT_EQ(ShapeOf(sum(x, {0})), (Dims{3}));
  EXPECT_EQ(Read(sum(x, {0})), Values(3, 0.0));
  EXPECT_TRUE(AllClose(Read(mean(x, {0})), Values(3, kNaN), {0, 0}));
  EXPECT_EQ(ShapeOf(sum(x, {1})), (Dims{0}));
  EXPECT_EQ(Read(sum(x)), (Values{0}));
  ExpectError([&] { amax(x, {0}); }, {"amax", "size 0"});
}

TEST(ReductionValuesTest, ZeroDimInputAndSum0Dim) {
  const Tensor x = Make({2.5}, {}, DType::kF32);
  EXPECT_TRUE(AllClose(Read(sum(x)), {2.5}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(mean(x)), {2.5}, {0, 0}));
  EXPECT_EQ(ShapeOf(sum(x)), Dims{});
  EXPECT_EQ(ShapeOf(sum(Make({1, 2, 3, 4}, {2, 2}))), Dims{});
}

// ---------------------------------------------------------------------------
// softmax / log_softmax / layer_norm.

// Rows of `in` (row-major `shape`) along `dim`: the flat indices of each row.
std::vector<std::vector<int64_t>> RowsAlong(const Dims& shape, int64_t dim) {
  std::map<std::vector<int64_t>, std::vector<int64_t>> rows;
  for (int64_t i = 0; i < Numel(shape); ++i) {
    Dims idx = Unravel(i, shape);
    idx[dim] = 0;
    rows[idx].push_back(i);
  }
  std::vector<std::vector<int64_t>> out;
  for (auto& [k, r] : rows) out.push_back(r);
  return out;
}

Values RefSoftmax(const Values& in, const Dims& shape, int64_t dim, bool log) {
  Values out(in.size());
  for (const auto& row : RowsAlong(shape, dim)) {
    double mx = -kInf;
    for (int64_t i : row) mx = std::max(mx, in[i]);
    double s = 0;
    for (int64_t i : row) s += std::exp(in[i] - mx);
    for (int64_t i : row)
      out[i] = log ? in[i] - mx - std::log(s) : std::exp(in[i] - mx) / s;
  }
  return out;
}

class SoftmaxTest : public ::testing::TestWithParam<DType> {};

TEST_P(SoftmaxTest, EveryDimAndLayout) {
  const DType dt = GetParam();
  const Tensor inputs[] = {
      RandomTensor({3, 4, 5}, dt, -3, 3, 31),
      RandomTensor({5, 3, 4}, dt, -3, 3, 32).permute({1, 2, 0})};
  for (const Tensor& x : inputs) {
    const Values in = Read(x);
    for (int64_t dim : {0, 1, 2, -1}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      for (bool log : {false, true}) {
        const Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_EQ(ShapeOf(y), (Dims{3, 4, 5}));
        EXPECT_TRUE(AllClose(Read(y), RefSoftmax(in, {3, 4, 5}, d, log),
                             TolFor(dt, true)))
            << (log ? "log_softmax " : "softmax ") << Name(dt) << " dim " << dim
            << (x.is_contiguous() ? "" : " non-contiguous");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, SoftmaxTest,
                         ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return Name(info.param); });

TEST(SoftmaxValuesTest, LargeAndInfiniteLogitsAreStable) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    const Values v = {1000, 1001, 1002, -kInf, 0, 1, -1000, -999, -998};
    const Tensor x = Make(v, {3, 3}, dt);
    EXPECT_TRUE(AllClose(Read(softmax(x, 1)), RefSoftmax(v, {3, 3}, 1, false),
                         TolFor(dt, true)));
    EXPECT_TRUE(AllClose(Read(log_softmax(x, 1)),
                         RefSoftmax(v, {3, 3}, 1, true), TolFor(dt, true)));
    EXPECT_TRUE(AllClose(Read(softmax(x, 0)), RefSoftmax(v, {3, 3}, 0, false),
                         TolFor(dt, true)));
  }
}

Values RefLayerNorm(const Values& x, int64_t n, const Values* w,
                    const Values* b, double eps) {
  Values out(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mu += x[r * n + i] / n;
    for (int64_t i = 0; i < n; ++i)
      var += (x[r * n + i] - mu) * (x[r * n + i] - mu) / n;
    for (int64_t i = 0; i < n; ++i) {
      double y = (x[r * n + i] - mu) / std::sqrt(var + eps);
      if (w) y *= (*w)[i];
      if (b) y += (*b)[i];
      out[r * n + i] = y;
    }
  }
  return out;
}

class LayerNormTest : public ::testing::TestWithParam<DType> {};

TEST_P(LayerNormTest, OneAndTwoTrailingDimsWithAndWithoutAffine) {
  const DType dt = GetParam();
  const Tensor inputs[] = {
      RandomTensor({2, 3, 4}, dt, -2, 3, 41),
      RandomTensor({4, 2, 3}, dt, -2, 3, 42).permute({1, 2, 0})};
  for (const Tensor& x : inputs) {
    const Values in = Read(x);
    for (const Dims& norm : {Dims{4}, Dims{3, 4}}) {
      const int64_t n = Numel(norm);
      const Tensor w = RandomTensor(norm, dt, 0.5, 1.5, 43),
                   b = RandomTensor(norm, dt, -1, 1, 44);
      const Values vw = Read(w), vb = Read(b);
      for (int affine = 0; affine < 3; ++affine) {
        for (double eps : {1e-5, 0.1}) {
          const Tensor y = layer_norm(x, norm, affine > 0 ? w : Tensor(),
                                      affine > 1 ? b : Tensor(), eps);
          EXPECT_EQ(y.dtype(), dt);
          EXPECT_EQ(ShapeOf(y), (Dims{2, 3, 4}));
          const Values want = RefLayerNorm(in, n, affine > 0 ? &vw : nullptr,
                                           affine > 1 ? &vb : nullptr, eps);
          EXPECT_TRUE(AllClose(Read(y), want, TolFor(dt, true)))
              << Name(dt) << " normalized " << DimsString(norm) << " affine "
              << affine << " eps " << eps
              << (x.is_contiguous() ? "" : " non-contiguous");
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, LayerNormTest,
                         ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return Name(info.param); });

// ---------------------------------------------------------------------------
// Matmul.

// Reference for batched matmul with broadcast batch dims; also returns, per
// output element, sum_k |a_ik * b_kj| (the scale of its rounding error).
Values RefMatmul(const Tensor& a, const Tensor& b, bool ta, bool tb,
                 Values* scale, Dims* out_shape) {
  const Values va = Read(a), vb = Read(b);
  const Dims sa = ShapeOf(a), sb = ShapeOf(b);
  const int64_t ra = sa.size(), rb = sb.size();
  const int64_t m = ta ? sa[ra - 1] : sa[ra - 2],
                k = ta ? sa[ra - 2] : sa[ra - 1];
  const int64_t n = tb ? sb[rb - 2] : sb[rb - 1];
  const Dims ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const Dims batch = BroadcastShape(ba, bb);
  *out_shape = batch;
  out_shape->push_back(m);
  out_shape->push_back(n);
  Values out, sc;
  for (int64_t bi = 0; bi < Numel(batch); ++bi) {
    const Dims idx = Unravel(bi, batch);
    const int64_t oa = BroadcastIndex(idx, ba) * sa[ra - 2] * sa[ra - 1];
    const int64_t ob = BroadcastIndex(idx, bb) * sb[rb - 2] * sb[rb - 1];
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, s_abs = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = va[oa + (ta ? p * m + i : i * k + p)];
          const double y = vb[ob + (tb ? j * k + p : p * n + j)];
          s += x * y;
          s_abs += std::fabs(x * y);
        }
        out.push_back(s);
        sc.push_back(s_abs);
      }
    }
  }
  *scale = sc;
  return out;
}

void CheckMatmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  Values scale;
  Dims shape;
  const Values want = RefMatmul(a, b, ta, tb, &scale, &shape);
  const Tensor c = matmul(a, b, ta, tb);
  EXPECT_EQ(c.dtype(), a.dtype());
  ASSERT_EQ(ShapeOf(c), shape);
  const Values got = Read(c);
  const Tol tol = TolFor(a.dtype());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tol.rtol * scale[i] + tol.atol &&
        bad++ < 5) {
      ADD_FAILURE() << "matmul " << Name(a.dtype())
                    << ir::ShapeToString(a.shape()) << " x "
                    << ir::ShapeToString(b.shape()) << " ta=" << ta
                    << " tb=" << tb << " [" << i << "] got " << got[i]
                    << " want " << want[i];
    }
  }
}

class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, TwoDimAllTransposeCombinations) {
  const DType dt = GetParam();
  const int64_t m = 3, k = 4, n = 5;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a =
          RandomTensor(ta ? Dims{k, m} : Dims{m, k}, dt, -1, 1, 51);
      const Tensor b =
          RandomTensor(tb ? Dims{n, k} : Dims{k, n}, dt, -1, 1, 52);
      CheckMatmul(a, b, ta, tb);
    }
  }
}

TEST_P(MatmulTest, BatchedAndBroadcastBatch) {
  const DType dt = GetParam();
  CheckMatmul(RandomTensor({2, 3, 4, 5}, dt, -1, 1, 53),
              RandomTensor({5, 6}, dt, -1, 1, 54), false, false);
  CheckMatmul(RandomTensor({3, 1, 4, 5}, dt, -1, 1, 55),
              RandomTensor({2, 5, 6}, dt, -1, 1, 56), false, false);
  CheckMatmul(RandomTensor({2, 5, 4}, dt, -1, 1, 57),
              RandomTensor({6, 5}, dt, -1, 1, 58), true, true);
  CheckMatmul(RandomTensor({4, 5}, dt, -1, 1, 59),
              RandomTensor({2, 3, 5, 6}, dt, -1, 1, 60), false, false);
  CheckMatmul(RandomTensor({2, 1, 5, 4}, dt, -1, 1, 61),
              RandomTensor({3, 6, 5}, dt, -1, 1, 62), true, true);
}

TEST_P(MatmulTest, NonContiguousOperands) {
  const DType dt = GetParam();
  const Tensor at =
      RandomTensor({5, 4}, dt, -1, 1, 63).t();  // [4, 5] column-major
  const Tensor bs =
      RandomTensor({10, 6}, dt, -1, 1, 64).slice(0, 0, 10, 2);  // row pitch 12
  const Tensor bc =
      RandomTensor({6, 8}, dt, -1, 1, 65).slice(1, 1, 6);  // [6, 5] pitch 8
  CheckMatmul(at, bs, false, false);
  CheckMatmul(at, bc, false, true);
  CheckMatmul(at.t(), bs, true, false);
  // Batched transposed view and a permuted batch.
  const Tensor ab =
      RandomTensor({2, 5, 4}, dt, -1, 1, 66).transpose(1, 2);  // [2, 4, 5]
  CheckMatmul(ab, bs, false, false);
  const Tensor ap =
      RandomTensor({4, 2, 5}, dt, -1, 1, 67).permute({1, 0, 2});  // [2, 4, 5]
  CheckMatmul(ap, RandomTensor({2, 5, 3}, dt, -1, 1, 68), false, false);
}

// Attention's operands: heads of a [B, T, 3 * H * D] QKV product sliced,
// reshaped and permuted to [B, H, T, D], whose batch dims collapse to two
// strides (one GEMM call per b), in every transpose form; and batch dims
// that collapse to no split (a copy), mixed with a broadcast operand.
TEST_P(MatmulTest, TwoLevelBatchStridesOfPermutedHeads) {
  const DType dt = GetParam();
  const int64_t b = 3, t = 5, h = 2, d = 4;
  const Tensor qkv = RandomTensor({b, t, 3 * h * d}, dt, -1, 1, 69);
  auto head = [&](int64_t i) {
    return qkv.slice(2, i * h * d, (i + 1) * h * d)
        .reshape({b, t, h, d})
        .permute({0, 2, 1, 3});
  };
  const Tensor q = head(0), k = head(1), v = head(2);
  CheckMatmul(q, k, false, true);                   // scores
  CheckMatmul(q, k.transpose(2, 3), false, false);  // the same, k^T as a view
  CheckMatmul(q.transpose(2, 3), k.transpose(2, 3), true,
              false);  // column-major
  const Tensor p = RandomTensor({b, h, t, t}, dt, -1, 1, 70);
  CheckMatmul(p, v, false, false);  // probabilities x values
  CheckMatmul(p, v, true, false);   // dV = P^T dO
  CheckMatmul(q, RandomTensor({h, d, t}, dt, -1, 1, 71), false,
              false);  // broadcast b
  // The scores read q and k where they are: b calls of h products, no copy.
  const Tensor out = empty({b, h, t, t}, {.dtype = dt});
  const std::vector<Tensor> in = {q, k};
  const ir::Attrs attrs = {{ir::AttrKey::kTransposeB, true}};
  const runtime::MatmulPlan plan = runtime::PlanMatmul(
      {ir::OpId::kMatmul, in, attrs, out}, [](const Tensor&, const Tensor&) {
        ADD_FAILURE() << "an operand was copied";
      });
  EXPECT_EQ(plan.outer, b);
  EXPECT_EQ(plan.gemm.batch, h);
  EXPECT_EQ(plan.outer_stride_a, t * 3 * h * d);
  EXPECT_EQ(plan.gemm.stride_a, d);
  // Three batch dims with strides that collapse at no split: copied.
  const Tensor odd =
      RandomTensor({2, 3, 4, 2, 3}, dt, -1, 1, 72).permute({1, 3, 0, 2, 4});
  CheckMatmul(odd, RandomTensor({3, 5}, dt, -1, 1, 73), false, false);
}

TEST_P(MatmulTest, EmptyInnerDimensionGivesZeros) {
  const DType dt = GetParam();
  const Tensor c =
      matmul(empty({2, 0}, {.dtype = dt}), empty({0, 3}, {.dtype = dt}));
  EXPECT_EQ(ShapeOf(c), (Dims{2, 3}));
  EXPECT_EQ(Read(c), Values(6, 0.0));
  const Tensor d = matmul(empty({0, 2}, {.dtype = dt}),
                          empty({3, 0}, {.dtype = dt}), true, true);
  EXPECT_EQ(ShapeOf(d), (Dims{2, 3}));
  EXPECT_EQ(Read(d), Values(6, 0.0));
  EXPECT_EQ(matmul(empty({0, 4}, {.dtype = dt}), empty({4, 3}, {.dtype = dt}))
                .numel(),
            0);
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, MatmulTest,
                         ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return Name(info.param); });

// ---------------------------------------------------------------------------
// Embedding, one_hot, slice.

TEST(EmbeddingTest, GathersRowsForAnyIndexShape) {
  for (DType wt : {DType::kF32, DType::kBF16, DType::kF64}) {
    for (DType it : {DType::kI64, DType::kI32}) {
      const Tensor w = RandomTensor({5, 3}, wt, -1, 1, 71);
      const Values idx = {4, 0, 4, 2, 1, 4};
      const Tensor out = embedding(w, Make(idx, {2, 3}, it));
      EXPECT_EQ(out.dtype(), wt);
      ASSERT_EQ(ShapeOf(out), (Dims{2, 3, 3}));
      const Values vw = Read(w);
      Values want;
      for (double i : idx) {
        for (int j = 0; j < 3; ++j)
          want.push_back(vw[static_cast<int>(i) * 3 + j]);
      }
      EXPECT_TRUE(AllClose(Read(out), want, {0, 0}));
      // A non-contiguous weight.
      const Tensor wt_view = RandomTensor({3, 5}, wt, -1, 1, 72).t();
      const Values vt = Read(wt_view);
      Values want_t;
      for (double i : idx) {
        for (int j = 0; j < 3; ++j)
          want_t.push_back(vt[static_cast<int>(i) * 3 + j]);
      }
      EXPECT_TRUE(AllClose(Read(embedding(wt_view, Make(idx, {6}, it))), want_t,
                           {0, 0}));
    }
  }
  ExpectError(
      [] {
        embedding(zeros({5, 3}), Make({5}, {1}, DType::kI64));
      },
      {"embedding", "5", "[0, 5)"});
}

TEST(EmbeddingTest, BackwardAccumulatesRepeatedIndices) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    const Values idx = {4, 0, 4, 2, 1, 4};
    const Tensor g = RandomTensor({2, 3, 3}, dt, -1, 1, 73);
    const DType it = dt == DType::kF32 ? DType::kI32 : DType::kI64;
    const Tensor out = embedding_backward(g, Make(idx, {2, 3}, it), 6);
    EXPECT_EQ(out.dtype(), dt);
    ASSERT_EQ(ShapeOf(out), (Dims{6, 3}));
    const Values vg = Read(g);
    Values want(18, 0.0);
    for (size_t i = 0; i < idx.size(); ++i) {
      for (int j = 0; j < 3; ++j)
        want[static_cast<int>(idx[i]) * 3 + j] += vg[i * 3 + j];
    }
    EXPECT_TRUE(AllClose(Read(out), want, TolFor(dt))) << Name(dt);
    EXPECT_TRUE(AllClose(Read(out.slice(0, 3, 4)), {0, 0, 0},
                         {0, 0}));  // row 3: no index
    EXPECT_TRUE(AllClose(Read(out.slice(0, 5, 6)), {0, 0, 0}, {0, 0}));
  }
}

TEST(OneHotTest, EncodesEachIndex) {
  const Values idx = {2, 0, 3, 3, 1, 0};
  for (DType dt : {DType::kF32, DType::kI64, DType::kBF16, DType::kBool}) {
    const Tensor out = one_hot(Make(idx, {2, 3}, DType::kI64), 4, dt);
    EXPECT_EQ(out.dtype(), dt);
    ASSERT_EQ(ShapeOf(out), (Dims{2, 3, 4}));
    Values want(24, 0.0);
    for (size_t i = 0; i < idx.size(); ++i)
      want[i * 4 + static_cast<int>(idx[i])] = 1;
    EXPECT_TRUE(AllClose(Read(out), want, {0, 0})) << Name(dt);
  }
  EXPECT_TRUE(AllClose(Read(one_hot(Make({1, 0}, {2}, DType::kI32), 2)),
                       {0, 1, 1, 0}, {0, 0}));
  ExpectError([] { one_hot(Make({4}, {1}, DType::kI64), 4); },
              {"one_hot", "4", "[0, 4)"});
  ExpectError([] { one_hot(Make({1}, {1}, DType::kF32), 4); },
              {"one_hot", "integer"});
}

TEST(SliceTest, ValuesStepsNegativeStartAndClamping) {
  const Tensor x = Make(Uniform(18, -1, 1, 81), {3, 6});
  const Values v = Read(x);
  struct Case {
    int64_t dim, start, end, step;
    Dims cols_or_rows;  // selected indices along `dim`
  };
  const Case cases[] = {{1, 1, 5, 2, {1, 3}},   {1, -4, 6, 1, {2, 3, 4, 5}},
                        {1, 0, 100, 4, {0, 4}}, {0, 1, 3, 1, {1, 2}},
                        {-1, 2, 3, 1, {2}},     {0, -1, 3, 5, {2}}};
  for (const Case& c : cases) {
    const Tensor s = x.slice(c.dim, c.start, c.end, c.step);
    const int64_t d = c.dim < 0 ? c.dim + 2 : c.dim;
    Values want;
    Dims want_shape = {3, 6};
    want_shape[d] = c.cols_or_rows.size();
    for (int64_t i = 0; i < Numel(want_shape); ++i) {
      Dims idx = Unravel(i, want_shape);
      idx[d] = c.cols_or_rows[idx[d]];
      want.push_back(v[idx[0] * 6 + idx[1]]);
    }
    EXPECT_EQ(ShapeOf(s), want_shape);
    EXPECT_TRUE(AllClose(Read(s), want, {0, 0}))
        << c.dim << " " << c.start << ":" << c.end;
    EXPECT_EQ(s.storage(), x.storage());
  }
  EXPECT_EQ(ShapeOf(x.slice(1, 4, 2)), (Dims{3, 0}));  // empty
}

TEST(SliceTest, SliceBackwardScattersIntoZeros) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16}) {
    const Tensor g = RandomTensor({3, 2}, dt, -1, 1, 82);
    const Values vg = Read(g);
    const Tensor out = slice_backward(g, {3, 6}, 1, 1, 5, 2);
    EXPECT_EQ(out.dtype(), dt);
    ASSERT_EQ(ShapeOf(out), (Dims{3, 6}));
    Values want(18, 0.0);
    for (int r = 0; r < 3; ++r) {
      want[r * 6 + 1] = vg[r * 2];
      want[r * 6 + 3] = vg[r * 2 + 1];
    }
    EXPECT_TRUE(AllClose(Read(out), want, {0, 0}));
    // Negative start along dim 0.
    const Tensor g0 = RandomTensor({2, 6}, dt, -1, 1, 83);
    const Values vg0 = Read(g0);
    Values want0(24, 0.0);
    for (int j = 0; j < 12; ++j) want0[12 + j] = vg0[j];
    EXPECT_TRUE(
        AllClose(Read(slice_backward(g0, {4, 6}, 0, -2, 4, 1)), want0, {0, 0}));
  }
}

// ---------------------------------------------------------------------------
// Dropout.

TEST(DropoutTest, KeepsAboutOneMinusPAndScalesKeptValues) {
  const int64_t n = 100000;
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    Generator gen(1234);
    const Tensor x = Make(Uniform(n, 0.5, 1.5, 91), {100, 1000});
    const Tensor y = dropout(x, p, true, &gen);
    const Values vx = Read(x), vy = Read(y);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (vy[i] == 0) continue;
      ++kept;
      // f32: the kernel multiplies by 1/(1-p) rounded to float.
      ASSERT_TRUE(Close(vy[i], vx[i] / (1 - p), 1e-6, 0)) << i << " p=" << p;
    }
    // The kept fraction is Binomial(n, 1-p)/n, with standard deviation
    // sqrt(p(1-p)/n) <= 0.00158; 0.01 is more than 6 standard deviations.
    EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 0.01) << "p=" << p;
  }
}

TEST(DropoutTest, SameSeedAndOffsetGiveTheSameMask) {
  const Tensor x = ones({64, 64}, {.dtype = DType::kF64});
  Generator g1(99), g2(99);
  const Values a = Read(dropout(x, 0.5, true, &g1));
  const Values b = Read(dropout(x, 0.5, true, &g2));
  EXPECT_EQ(a, b);
  const Values c =
      Read(dropout(x, 0.5, true, &g1));  // next offset: a fresh mask
  EXPECT_NE(a, c);
  g1.set_offset(0);  // replay
  EXPECT_EQ(Read(dropout(x, 0.5, true, &g1)), a);
  Generator g3(100);
  EXPECT_NE(Read(dropout(x, 0.5, true, &g3)), a);
  for (double v : a) EXPECT_TRUE(v == 0 || v == 2) << v;
  // The default generator follows manual_seed.
  manual_seed(5);
  const Values d1 = Read(dropout(x, 0.5));
  manual_seed(5);
  EXPECT_EQ(Read(dropout(x, 0.5)), d1);
}

TEST(DropoutTest, IdentityForZeroPAndInEval) {
  const Tensor x = RandomTensor({8, 8}, DType::kF32, -1, 1, 92);
  const Values vx = Read(x);
  EXPECT_EQ(Read(dropout(x, 0.0)), vx);
  EXPECT_EQ(Read(dropout(x, 0.7, /*training=*/false)), vx);
  ExpectError([&] { dropout(x, 1.0); }, {"dropout", "p"});
  ExpectError([&] { dropout(x, -0.1); }, {"dropout", "p"});
}

TEST(DropoutTest, LowPrecisionAndNonContiguousInputs) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    Generator gen(3);
    const Tensor x = RandomTensor({40, 50}, dt, 0.5, 1.5, 93).t();
    const Values vx = Read(x), vy = Read(dropout(x, 0.25, true, &gen));
    int64_t kept = 0;
    for (size_t i = 0; i < vx.size(); ++i) {
      if (vy[i] == 0) continue;
      ++kept;
      EXPECT_TRUE(Close(vy[i], vx[i] / 0.75, TolFor(dt).rtol, 0)) << i;
    }
    // sd of the kept fraction: sqrt(0.1875 / 2000) = 0.0097; 0.05 is 5 sd.
    EXPECT_NEAR(kept / 2000.0, 0.75, 0.05);
  }
}

// ---------------------------------------------------------------------------
// Losses.

Values RefCrossEntropyRows(const Values& x, const Values& t, int64_t c,
                           double ls) {
  const int64_t n = t.size();
  Values loss(n);
  for (int64_t i = 0; i < n; ++i) {
    double mx = -kInf, s = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, x[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(x[i * c + j] - mx);
    const double lse = mx + std::log(s);
    // -sum_j q_j log p_j with q = (1 - ls) * onehot(t) + ls / C.
    double l = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double q = (j == t[i] ? 1 - ls : 0) + ls / c;
      l -= q * (x[i * c + j] - lse);
    }
    loss[i] = l;
  }
  return loss;
}

TEST(CrossEntropyTest, ReductionsAndLabelSmoothing) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    const Tensor x = RandomTensor({6, 5}, dt, -3, 3, 101);
    const Values t = {0, 4, 2, 2, 1, 3};
    const Tensor tt = Make(t, {6}, DType::kI64);
    for (double ls : {0.0, 0.1}) {
      const Values rows = RefCrossEntropyRows(Read(x), t, 5, ls);
      double total = 0;
      for (double r : rows) total += r;
      const Tensor none = cross_entropy(x, tt, "none", ls);
      EXPECT_EQ(none.dtype(), dt);
      EXPECT_EQ(ShapeOf(none), (Dims{6}));
      EXPECT_TRUE(AllClose(Read(none), rows, TolFor(dt, true)))
          << Name(dt) << " ls " << ls;
      const Tensor s = cross_entropy(x, tt, "sum", ls),
                   m = cross_entropy(x, tt, "mean", ls);
      EXPECT_EQ(ShapeOf(s), Dims{});
      EXPECT_TRUE(AllClose(Read(s), {total}, TolFor(dt, true)))
          << Name(dt) << " ls " << ls;
      EXPECT_TRUE(AllClose(Read(m), {total / 6}, TolFor(dt, true)))
          << Name(dt) << " ls " << ls;
    }
    // Non-contiguous logits.
    const Tensor xt = RandomTensor({5, 6}, dt, -3, 3, 102).t();
    EXPECT_TRUE(AllClose(Read(cross_entropy(xt, tt, "none")),
                         RefCrossEntropyRows(Read(xt), t, 5, 0),
                         TolFor(dt, true)));
  }
}

TEST(CrossEntropyTest, LargeLogitsAreStable) {
  const Values v = {1000, 0, -1000, 500, 501, 502};
  const Tensor x = Make(v, {2, 3});
  const Values want = RefCrossEntropyRows(v, {0, 1}, 3, 0);
  EXPECT_TRUE(
      AllClose(Read(cross_entropy(x, Make({0, 1}, {2}, DType::kI64), "none")),
               want, TolFor(DType::kF32, true)));
}

TEST(MseLossTest, Reductions) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16}) {
    const Tensor a = RandomTensor({3, 4}, dt, -2, 2, 111);
    const Tensor b = RandomTensor({4, 3}, dt, -2, 2, 112).t();
    const Values va = Read(a), vb = Read(b);
    Values sq;
    double total = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      sq.push_back((va[i] - vb[i]) * (va[i] - vb[i]));
      total += sq.back();
    }
    const Tensor none = mse_loss(a, b, "none");
    EXPECT_EQ(none.dtype(), dt);
    EXPECT_EQ(ShapeOf(none), (Dims{3, 4}));
    EXPECT_TRUE(AllClose(Read(none), sq, TolFor(dt))) << Name(dt);
    EXPECT_TRUE(AllClose(Read(mse_loss(a, b, "sum")), {total}, TolFor(dt)))
        << Name(dt);
    EXPECT_TRUE(AllClose(Read(mse_loss(a, b)), {total / 12}, TolFor(dt)))
        << Name(dt);
  }
  ExpectError(
      [] {
        mse_loss(zeros({2, 3}), zeros({3, 2}));
      },
      {"mse_loss", "[2, 3]", "[3, 2]"});
  ExpectError([] { mse_loss(zeros({2}), zeros({2}), "avg"); },
              {"mse_loss", "avg"});
}

// ---------------------------------------------------------------------------
// In-place updates.

// Applies `f` to a copy of `self` and checks values against `want` and that
// the version counter moved by exactly one.
template <typename F>
void CheckInplace(const Tensor& self, F f, const Values& want, Tol tol,
                  const std::string& what) {
  const uint64_t v0 = self.version();
  Tensor t = self;
  f(t);
  EXPECT_EQ(self.version(), v0 + 1) << what;
  EXPECT_TRUE(AllClose(Read(self), want, tol)) << what;
}

TEST(InplaceTest, ArithmeticUpdatesWithBroadcasting) {
  for (DType dt : kFloatTypes) {
    // Results may cancel to near zero, so atol scales with the operands (<= 8).
    Tol tol = TolFor(dt);
    tol.atol = 8 * tol.rtol;
    auto fresh = [&] { return RandomTensor({2, 3}, dt, -2, 2, 121); };
    const Values s = Read(fresh());
    // An f64 operand: PyTorch computes in f64 and rounds once; the tolerance
    // also covers rounding the operand to the target dtype first.
    const Tensor o = RandomTensor({3}, DType::kF64, -2, 2, 122);
    const Tensor t1 = RandomTensor({2, 1}, dt, -2, 2, 123);
    const Tensor t2 = RandomTensor({2, 3}, dt, 0.5, 2, 124);
    const Tensor wt = RandomTensor({2, 3}, dt, 0, 1, 125);
    const Values vo = Read(o);
    const Values v1 = Read(t1), v2 = Read(t2), vw = Read(wt);
    auto want = [&](auto fn) {
      Values w(6);
      for (int i = 0; i < 6; ++i) w[i] = fn(i, i % 3, i / 3);
      return w;
    };
    CheckInplace(
        fresh(), [&](Tensor& t) { t.add_(o, -0.5); },
        want([&](int i, int c, int) { return s[i] - 0.5 * vo[c]; }), tol,
        "add_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.sub_(t2); },
        want([&](int i, int, int) { return s[i] - v2[i]; }), tol,
        "sub_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.mul_(t1); },
        want([&](int i, int, int r) { return s[i] * v1[r]; }), tol,
        "mul_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.mul_(2.5); },
        want([&](int i, int, int) { return s[i] * 2.5; }), tol,
        "mul_ scalar " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.addcmul_(t1, t2, 0.5); },
        want([&](int i, int, int r) { return s[i] + 0.5 * v1[r] * v2[i]; }),
        tol, "addcmul_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.addcdiv_(t1, t2, -2); },
        want([&](int i, int, int r) { return s[i] - 2 * v1[r] / v2[i]; }), tol,
        "addcdiv_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.lerp_(t2, wt); },
        want([&](int i, int, int) { return s[i] + vw[i] * (v2[i] - s[i]); }),
        tol, "lerp_ tensor weight " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.lerp_(t1, 0.25); },
        want([&](int i, int, int r) { return s[i] + 0.25 * (v1[r] - s[i]); }),
        tol, "lerp_ scalar weight " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.fill_(-1.25); },
        want([&](int, int, int) { return -1.25; }), {0, 0},
        "fill_ " + Name(dt));
    CheckInplace(
        fresh(), [&](Tensor& t) { t.zero_(); },
        want([&](int, int, int) { return 0.0; }), {0, 0}, "zero_ " + Name(dt));
  }
}

TEST(InplaceTest, CopyConvertsDtypesAndBroadcasts) {
  // i64 -> f32.
  CheckInplace(
      zeros({4}),
      [](Tensor& t) {
        t.copy_(Make({1, -2, 3, 1 << 25}, {4}, DType::kI64));
      },
      {1, -2, 3, 1 << 25}, {0, 0}, "copy_ i64 -> f32");
  // f64 [3] broadcast into f32 [2, 3].
  const Values src = {0.1, -0.2, 1.0 / 3};
  Values want;
  for (int r = 0; r < 2; ++r) {
    for (double v : src) want.push_back(static_cast<float>(v));
  }
  CheckInplace(
      zeros({2, 3}), [&](Tensor& t) { t.copy_(Make(src, {3}, DType::kF64)); },
      want, {0, 0}, "copy_ f64 broadcast");
  // f32 -> bf16 rounds to nearest even; f32 -> i32 truncates; bool <- f32.
  const Values fv = {1 + std::ldexp(1.0, -8), 1 + 3 * std::ldexp(1.0, -8),
                     -2.75};
  CheckInplace(
      zeros({3}, {.dtype = DType::kBF16}),
      [&](Tensor& t) { t.copy_(Make(fv, {3})); },
      {1, 1 + std::ldexp(1.0, -6), -2.75}, {0, 0}, "copy_ f32 -> bf16");
  CheckInplace(
      zeros({3}, {.dtype = DType::kI32}),
      [&](Tensor& t) { t.copy_(Make(fv, {3})); }, {1, 1, -2}, {0, 0},
      "copy_ f32 -> i32");
  CheckInplace(
      zeros({3}, {.dtype = DType::kBool}),
      [&](Tensor& t) {
        t.copy_(Make({0, 0.5, -3}, {3}));
      },
      {0, 1, 1}, {0, 0}, "copy_ f32 -> bool");
  // fill_ on integers.
  CheckInplace(
      zeros({2}, {.dtype = DType::kI64}), [](Tensor& t) { t.fill_(7); }, {7, 7},
      {0, 0}, "fill_ i64");
}

TEST(InplaceTest, WritesThroughViewsAndSharesVersion) {
  const Tensor base = Make(Uniform(12, -1, 1, 131), {3, 4});
  const Values v = Read(base);
  Tensor col = base.slice(1, 1, 4, 2);  // columns 1 and 3, strided
  const uint64_t v0 = base.version();
  col.add_(ones({3, 2}), 10);
  EXPECT_EQ(base.version(), v0 + 1);  // the storage's counter
  EXPECT_EQ(col.version(), v0 + 1);
  Values want = v;
  for (int r = 0; r < 3; ++r) {
    want[r * 4 + 1] += 10;
    want[r * 4 + 3] += 10;
  }
  EXPECT_TRUE(AllClose(Read(base), want, TolFor(DType::kF32)));
  Tensor tr = base.t();
  tr.slice(0, 0, 1).fill_(0);  // row 0 of the transpose = column 0 of base
  for (int r = 0; r < 3; ++r) want[r * 4] = 0;
  EXPECT_TRUE(AllClose(Read(base), want, TolFor(DType::kF32)));
  tr.copy_(Make(Uniform(12, 0, 1, 132), {4, 3}, DType::kF64));
  const Values src = Read(Make(Uniform(12, 0, 1, 132), {4, 3}, DType::kF32));
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) want[r * 4 + c] = src[c * 3 + r];
  }
  EXPECT_TRUE(AllClose(Read(base), want, {0, 0}));
}

TEST(InplaceTest, CopyFromAnOverlappingViewOfItself) {
  const Values v = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  Tensor x = Make(v, {3, 3});
  x.copy_(x.t());
  EXPECT_EQ(Read(x), (Values{1, 4, 7, 2, 5, 8, 3, 6, 9}));
  Tensor y = Make({1, 2, 3, 4, 5}, {5});
  y.slice(0, 1, 5).copy_(y.slice(0, 0, 4));  // shift right by one
  EXPECT_EQ(Read(y), (Values{1, 1, 2, 3, 4}));
}

TEST(InplaceTest, Errors) {
  Tensor i = zeros({3}, {.dtype = DType::kI64});
  ExpectError([&] { i.add_(ones({3}, {.dtype = DType::kI64})); },
              {"add_", "floating"});
  Tensor f = zeros({2, 3});
  ExpectError([&] { f.add_(ones({3, 3})); }, {"add_", "[3, 3]", "[2, 3]"});
  ExpectError(
      [&] {
        f.copy_(ones({2, 1, 3}));
      },
      {"copy_", "[2, 1, 3]", "[2, 3]"});
}

// ---------------------------------------------------------------------------
// Factories and random numbers.

TEST(FactoryTest, FullZerosOnesForEveryDtype) {
  for (DType dt : kAllTypes) {
    const double value = dt == DType::kBool ? 1 : -3;
    const Tensor f = full({2, 3}, value, {.dtype = dt});
    EXPECT_EQ(f.dtype(), dt);
    EXPECT_EQ(ShapeOf(f), (Dims{2, 3}));
    EXPECT_TRUE(f.is_contiguous());
    EXPECT_TRUE(AllClose(Read(f), Values(6, value), {0, 0})) << Name(dt);
    EXPECT_TRUE(AllClose(Read(zeros({4}, {.dtype = dt})), Values(4, 0), {0, 0}))
        << Name(dt);
    EXPECT_TRUE(AllClose(Read(ones({4}, {.dtype = dt})), Values(4, 1), {0, 0}))
        << Name(dt);
  }
  EXPECT_TRUE(AllClose(Read(full({2}, 0.1, {.dtype = DType::kF16})),
                       {RoundHalf(0.1), RoundHalf(0.1)}, {0, 0}));
  EXPECT_EQ(ShapeOf(scalar_tensor(2.0)), Dims{});
  EXPECT_TRUE(AllClose(Read(scalar_tensor(2.5)), {2.5}, {0, 0}));
  EXPECT_EQ(zeros({0, 3}).numel(), 0);
  ExpectError([] { zeros({2, -1}); }, {"negative"});
}

TEST(FactoryTest, Arange) {
  const Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), DType::kI64);
  EXPECT_TRUE(AllClose(Read(a), {0, 1, 2, 3, 4}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(arange(0, 10, 3)), {0, 3, 6, 9}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(arange(5, 0, -2)), {5, 3, 1}, {0, 0}));
  const Tensor f = arange(1, 2, 0.25, {.dtype = DType::kF32});
  EXPECT_EQ(f.dtype(), DType::kF32);
  EXPECT_TRUE(AllClose(Read(f), {1, 1.25, 1.5, 1.75}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(arange(-1, 0.5, 0.5, {.dtype = DType::kF64})),
                       {-1, -0.5, 0}, {0, 0}));
  EXPECT_EQ(arange(3, 3).numel(), 0);
  EXPECT_EQ(arange(3, 1).numel(), 0);
  ExpectError([] { arange(0, 1, 0); }, {"arange", "step"});
}

TEST(RandomTest, RandIsUniformOnZeroOne) {
  for (DType dt : kFloatTypes) {
    Generator gen(2024);
    const int64_t n = 100000;
    const Tensor r = rand({n}, {.dtype = dt}, &gen);
    EXPECT_EQ(r.dtype(), dt);
    const Values v = Read(r);
    double s = 0, ss = 0;
    for (double x : v) {
      ASSERT_GE(x, 0.0) << Name(dt);
      ASSERT_LT(x, 1.0) << Name(dt);
      s += x;
      ss += x * x;
    }
    const double mean = s / n, var = ss / n - mean * mean;
    // sd of the sample mean: sqrt(1/12 / n) = 0.00091; 0.005 is 5.5 sd
    // (bf16 rounding shifts values by <= 2e-3 but unbiased on average).
    EXPECT_NEAR(mean, 0.5, 0.005) << Name(dt);
    EXPECT_NEAR(var, 1.0 / 12, 0.003) << Name(dt);
  }
}

TEST(RandomTest, RandnIsStandardNormal) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    Generator gen(7);
    const int64_t n = 100000;
    const Values v = Read(randn({100, 1000}, {.dtype = dt}, &gen));
    double s = 0, ss = 0;
    int64_t within1 = 0;
    for (double x : v) {
      ASSERT_TRUE(std::isfinite(x));
      s += x;
      ss += x * x;
      within1 += std::fabs(x) < 1;
    }
    const double mean = s / n, sd = std::sqrt(ss / n - mean * mean);
    // sd of the sample mean 1/sqrt(n) = 0.0032 (0.02 is 6.3 sd); of the sample
    // sd about 1/sqrt(2n) = 0.0022 (0.015 is 6.7 sd); of P(|x| < 1) about
    // sqrt(0.68 * 0.32 / n) = 0.0015 (0.01 is 6.8 sd).
    EXPECT_NEAR(mean, 0, 0.02) << Name(dt);
    EXPECT_NEAR(sd, 1, 0.015) << Name(dt);
    EXPECT_NEAR(static_cast<double>(within1) / n, 0.682689, 0.01) << Name(dt);
  }
}

TEST(RandomTest, RandintCoversTheRangeOnly) {
  for (DType dt : {DType::kI64, DType::kI32}) {
    Generator gen(11);
    const Tensor r = randint(-3, 7, {20000}, {.dtype = dt}, &gen);
    EXPECT_EQ(r.dtype(), dt);
    std::map<int64_t, int64_t> counts;
    for (double x : Read(r)) counts[static_cast<int64_t>(x)]++;
    ASSERT_EQ(counts.size(), 10u);
    EXPECT_EQ(counts.begin()->first, -3);
    EXPECT_EQ(counts.rbegin()->first, 6);
    // Each count ~ Binomial(20000, 0.1): mean 2000, sd 42.
    for (auto [value, count] : counts) EXPECT_NEAR(count, 2000, 300) << value;
  }
  ExpectError([] { randint(3, 3, {2}); }, {"randint", "low < high"});
}

TEST(RandomTest, ManualSeedMakesDrawsDeterministic) {
  manual_seed(42);
  const Values a = Read(rand({1000}));
  const Values b = Read(randn({1000}));
  const Values c = Read(randint(0, 100, {1000}));
  manual_seed(42);
  EXPECT_EQ(Read(rand({1000})), a);
  EXPECT_EQ(Read(randn({1000})), b);
  EXPECT_EQ(Read(randint(0, 100, {1000})), c);
  EXPECT_NE(Read(rand({1000})), a);  // the stream moves on
  manual_seed(43);
  EXPECT_NE(Read(rand({1000})), a);
  // Explicit generators are independent of the default one.
  Generator g1(5), g2(5);
  manual_seed(1);
  const Values d = Read(rand({100}, {}, &g1));
  manual_seed(2);
  EXPECT_EQ(Read(rand({100}, {}, &g2)), d);
  ExpectError([] { rand({2}, {.dtype = DType::kI64}); }, {"rand", "floating"});
}

// ---------------------------------------------------------------------------
// Views.

TEST(ViewTest, ReshapeOfContiguousIsAViewAndWritesShow) {
  const Tensor x = Make(Uniform(12, -1, 1, 141), {3, 4});
  Tensor v = x.reshape({2, 6});
  EXPECT_EQ(v.storage(), x.storage());
  EXPECT_EQ(Read(v), Read(x));
  v.slice(1, 5, 6).fill_(42);  // elements 5 and 11 of the flat order
  const Values vx = Read(x);
  EXPECT_EQ(vx[5], 42);
  EXPECT_EQ(vx[11], 42);
  Tensor w = x.view({4, 3});
  EXPECT_EQ(w.storage(), x.storage());
  x.slice(0, 0, 1).zero_();
  EXPECT_TRUE(AllClose(Read(w.slice(0, 0, 1)), {0, 0, 0}, {0, 0}));
  EXPECT_EQ(ShapeOf(x.reshape({-1})), (Dims{12}));
  EXPECT_EQ(ShapeOf(x.reshape({2, -1, 3})), (Dims{2, 2, 3}));
  EXPECT_EQ(ShapeOf(x.flatten()), (Dims{12}));
}

TEST(ViewTest, ReshapeOfTransposeCopiesAndViewThrows) {
  const Values v = Uniform(12, -1, 1, 142);
  const Tensor x = Make(v, {3, 4});
  const Tensor t = x.t();
  const Tensor r = t.reshape({12});
  EXPECT_NE(r.storage(), x.storage());
  Values want;
  for (int c = 0; c < 4; ++c) {
    for (int rr = 0; rr < 3; ++rr)
      want.push_back(static_cast<float>(v[rr * 4 + c]));
  }
  EXPECT_EQ(Read(r), want);
  ExpectError([&] { t.view({12}); }, {"view", "[4, 3]", "reshape"});
  // Some non-contiguous layouts still reshape without a copy.
  const Tensor s =
      Make(Uniform(24, -1, 1, 143), {4, 6}).slice(0, 0, 4, 2);  // [2, 6]
  const Tensor sv = s.view({2, 2, 3});
  EXPECT_EQ(sv.storage(), s.storage());
  EXPECT_EQ(Read(sv), Read(s));
  const Tensor row = t.slice(0, 1, 2);  // [1, 3] with strides [1, 4]
  EXPECT_EQ(row.view({3}).storage(), x.storage());
  EXPECT_EQ(Read(row.view({3})), Read(row));
  const Tensor u = t.unsqueeze(1);  // [4, 1, 3]
  EXPECT_EQ(Read(u.view({4, 3})), Read(t));
  EXPECT_EQ(u.view({4, 3}).storage(), x.storage());
}

TEST(ViewTest, PermuteExpandSqueezeUnsqueezeShareStorage) {
  const Values v = Uniform(6, -1, 1, 144);
  const Tensor x = Make(v, {2, 1, 3});
  const Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(ShapeOf(p), (Dims{3, 2, 1}));
  Values want_p;
  for (int c = 0; c < 3; ++c) {
    for (int r = 0; r < 2; ++r)
      want_p.push_back(static_cast<float>(v[r * 3 + c]));
  }
  EXPECT_EQ(Read(p), want_p);
  const Tensor e = x.expand({4, 2, 5, 3});
  EXPECT_EQ(ShapeOf(e), (Dims{4, 2, 5, 3}));
  const Values ve = Read(e), vx = Read(x);
  for (int64_t i = 0; i < e.numel(); ++i) {
    const Dims idx = Unravel(i, {4, 2, 5, 3});
    ASSERT_EQ(ve[i], vx[idx[1] * 3 + idx[3]]);
  }
  EXPECT_EQ(ShapeOf(x.expand({2, -1, 3})), (Dims{2, 1, 3}));
  EXPECT_EQ(ShapeOf(x.squeeze()), (Dims{2, 3}));
  EXPECT_EQ(ShapeOf(x.squeeze(1)), (Dims{2, 3}));
  EXPECT_EQ(ShapeOf(x.squeeze(0)), (Dims{2, 1, 3}));  // not size 1: unchanged
  EXPECT_EQ(ShapeOf(x.unsqueeze(0)), (Dims{1, 2, 1, 3}));
  EXPECT_EQ(ShapeOf(x.unsqueeze(-1)), (Dims{2, 1, 3, 1}));
  EXPECT_EQ(ShapeOf(x.unsqueeze(2)), (Dims{2, 1, 1, 3}));
  for (const Tensor& view :
       {p, e, x.squeeze(), x.unsqueeze(0), x.unsqueeze(-1)}) {
    EXPECT_EQ(view.storage(), x.storage());
  }
  EXPECT_EQ(Read(x.squeeze()), vx);
  EXPECT_EQ(Read(x.unsqueeze(-1)), vx);
  // A write through the expanded squeeze shows in the base.
  x.squeeze().slice(1, 2, 3).fill_(5);
  EXPECT_EQ(Read(x)[2], 5);
  EXPECT_EQ(Read(x)[5], 5);
  ExpectError([&] { x.expand({2, 2, 4}); }, {"expand", "3", "4"});
  ExpectError([&] { x.permute({0, 0, 1}); }, {"permute", "not a permutation"});
}

TEST(ViewTest, ZeroDimTensorsReshapeFlattenUnsqueezeAndExpand) {
  const Tensor s = Make({2.5}, {});
  for (const Dims& shape : {Dims{1}, Dims{1, 1}, Dims{1, 1, 1, 1}}) {
    const Tensor r = s.reshape(shape);
    EXPECT_EQ(ShapeOf(r), shape);
    EXPECT_EQ(r.storage(), s.storage());
    EXPECT_EQ(Read(r), (Values{2.5}));
    EXPECT_EQ(ShapeOf(r.reshape({})), Dims{});
  }
  EXPECT_EQ(ShapeOf(s.view({1, 1})), (Dims{1, 1}));
  EXPECT_EQ(ShapeOf(s.flatten()), (Dims{1}));
  EXPECT_EQ(ShapeOf(s.unsqueeze(0)), (Dims{1}));
  EXPECT_EQ(ShapeOf(s.unsqueeze(-1)), (Dims{1}));
  const Tensor e = s.expand({2, 3});
  EXPECT_EQ(Read(e), Values(6, 2.5));
  ExpectError([&] { s.reshape({2}); }, {"reshape", "[]", "2"});
}

TEST(ViewTest, ContiguousAndCloneCopy) {
  const Values v = Uniform(6, -1, 1, 145);
  const Tensor x = Make(v, {2, 3});
  EXPECT_TRUE(x.contiguous().is_same(x));  // already contiguous: no copy
  const Tensor c = x.t().contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), x.storage());
  EXPECT_EQ(Read(c), Read(x.t()));
  const Tensor k = x.clone();
  EXPECT_NE(k.storage(), x.storage());
  EXPECT_EQ(Read(k), Read(x));
  for (DType dt : {DType::kBF16, DType::kI32, DType::kBool}) {
    const Tensor y = Make({1, 0, 3, 4, 0, 6}, {2, 3}, dt);
    EXPECT_EQ(Read(y.t().contiguous()), Read(y.t())) << Name(dt);
  }
}

// Copies out of permuted, sliced and broadcast views (CopyInto walks them
// in the source's memory order) against index arithmetic: every permutation
// of a 4-d tensor whose values are their own flat index, a slice of each
// (attention's q/k/v out of one QKV product), an expanded dim, and casts to
// bf16 and f64 on the way (the indices are exact in both).
TEST(ViewTest, CopiesOfPermutedSlicedAndExpandedViewsMatchIndexArithmetic) {
  const Shape full = {2, 3, 4, 6};  // 144 elements: exact in bf16
  std::vector<double> iota(144);
  for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<double>(i);
  const Tensor x = from_vector(iota, full).to(DType::kF32);
  std::vector<int64_t> perm = {0, 1, 2, 3};
  int checked = 0;
  do {
    const Tensor sliced = x.slice(3, 2, 6);  // [2, 3, 4, 4] of [.., 6]
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF64}) {
      const Tensor v = sliced.permute(perm);
      const Tensor c = v.to(dt).contiguous().to(DType::kF64);
      ASSERT_TRUE(c.is_contiguous());
      const std::vector<double> got = c.to_vector<double>();
      const Shape vs = v.shape();
      int64_t flat = 0;
      std::vector<int64_t> idx(4, 0);  // index into v
      for (idx[0] = 0; idx[0] < vs[0]; ++idx[0]) {
        for (idx[1] = 0; idx[1] < vs[1]; ++idx[1]) {
          for (idx[2] = 0; idx[2] < vs[2]; ++idx[2]) {
            for (idx[3] = 0; idx[3] < vs[3]; ++idx[3], ++flat) {
              int64_t src[4];
              for (int d = 0; d < 4; ++d) src[perm[d]] = idx[d];
              const double want = static_cast<double>(
                  ((src[0] * 3 + src[1]) * 4 + src[2]) * 6 + src[3] + 2);
              ASSERT_EQ(got[flat], want)
                  << "perm " << perm[0] << perm[1] << perm[2] << perm[3]
                  << " dtype " << ir::DTypeName(dt) << " at " << flat;
            }
          }
        }
      }
      ++checked;
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
  EXPECT_EQ(checked, 24 * 3);
  // Large enough to split across threads: the k part of a [B, T, 3, H, D]
  // QKV product as [B, H, T, D] heads.
  {
    const int64_t B = 16, T = 64, H = 4, D = 32;
    std::vector<float> qkv(B * T * 3 * H * D);
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i);
    const Tensor heads = from_vector(qkv, {B, T, 3, H, D})
                             .slice(2, 1, 2)
                             .reshape({B, T, H, D})
                             .permute({0, 2, 1, 3});
    const std::vector<float> got = heads.contiguous().to_vector<float>();
    for (int64_t b = 0, flat = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < D; ++d, ++flat)
            ASSERT_EQ(got[flat], static_cast<float>(
                                     (((b * T + t) * 3 + 1) * H + h) * D + d))
                << "b " << b << " h " << h << " t " << t << " d " << d;
  }
  // A broadcast dim (stride 0) between permuted ones.
  const Tensor row = from_vector(std::vector<double>{1, 2, 3}, {3, 1, 1})
                         .expand({3, 7, 2})
                         .permute({1, 0, 2});  // [7, 3, 2]
  const std::vector<double> b = row.contiguous().to_vector<double>();
  for (int64_t i = 0; i < 7; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 2; ++k)
        ASSERT_EQ(b[(i * 3 + j) * 2 + k], static_cast<double>(j + 1));
}

// ---------------------------------------------------------------------------
// User errors name the shapes involved.

TEST(ErrorTest, ShapeMismatchesNameBothShapes) {
  ExpectError([] { add(zeros({2, 3}), zeros({2})); }, {"add", "[2, 3]", "[2]"});
  ExpectError(
      [] {
        mul(zeros({4, 3}), zeros({2, 1, 2}));
      },
      {"mul", "[4, 3]", "[2, 1, 2]"});
  ExpectError(
      [] {
        matmul(zeros({2, 3}), zeros({4, 5}));
      },
      {"matmul", "[2, 3]", "[4, 5]", "3 vs 4"});
  ExpectError(
      [] {
        matmul(zeros({2, 3}), zeros({2, 5}), true, true);
      },
      {"matmul", "[2, 3]", "[2, 5]"});
  ExpectError(
      [] {
        matmul(zeros({3}), zeros({3, 5}));
      },
      {"matmul", "[3]", "[3, 5]"});
  ExpectError(
      [] {
        matmul(zeros({2, 3}), zeros({3, 4}, {.dtype = DType::kF64}));
      },
      {"matmul", "f32", "f64"});
  ExpectError(
      [] {
        matmul(zeros({2, 2, 3}), zeros({3, 3, 4}));
      },
      {"matmul", "[2, 2, 3]", "[3, 3, 4]"});
  ExpectError(
      [] {
        cross_entropy(zeros({2, 3}), Make({1, 3}, {2}, DType::kI64));
      },
      {"cross_entropy", "target 3", "3 classes"});
  ExpectError(
      [] {
        cross_entropy(zeros({2, 3}), Make({1, -1}, {2}, DType::kI64));
      },
      {"cross_entropy", "-1"});
  ExpectError(
      [] {
        cross_entropy(zeros({2, 3}), Make({1, 2, 0}, {3}, DType::kI64));
      },
      {"cross_entropy", "[2, 3]", "[3]"});
  ExpectError(
      [] {
        cross_entropy(zeros({2, 3}), Make({1, 2}, {2}, DType::kI32));
      },
      {"cross_entropy", "i64"});
  ExpectError(
      [] {
        layer_norm(zeros({2, 3, 4}), {5});
      },
      {"layer_norm", "[5]", "[2, 3, 4]"});
  ExpectError(
      [] {
        layer_norm(zeros({2, 3, 4}), {4}, zeros({3}));
      },
      {"layer_norm", "[4]", "[3]"});
  ExpectError(
      [] {
        zeros({2, 3}).reshape({4, 2});
      },
      {"reshape", "[2, 3]", "4, 2"});
  ExpectError([] { zeros({2, 3}).view({5}); }, {"[2, 3]", "5"});
  ExpectError([] { softmax(zeros({2, 3}), 2); }, {"softmax", "dim 2"});
  ExpectError(
      [] {
        where(Make({1, 0}, {2}, DType::kBool), zeros({3}), zeros({3}));
      },
      {"where", "[2]", "[3]"});
}

// ---------------------------------------------------------------------------
// Large tensors: the threaded kernel paths (> 2 * 32768 elements per op).

TEST(LargeTensorTest, ElementwiseUnaryBinaryCompareWhereCast) {
  const Dims shape = {400, 300};
  const Tensor a = RandomTensor(shape, DType::kF32, -3, 3, 151);
  const Tensor bt =
      RandomTensor({300, 400}, DType::kF32, 0.5, 2, 152).t();  // non-contiguous
  const Tensor row = RandomTensor({300}, DType::kF32, -1, 1, 153);
  const Values va = Read(a), vb = Read(bt), vr = Read(row);
  const int64_t n = Numel(shape);
  Values want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = RefGelu(va[i]);
  EXPECT_TRUE(AllClose(Read(gelu(a)), want, TolFor(DType::kF32, true)))
      << "gelu";
  for (int64_t i = 0; i < n; ++i) want[i] = std::exp(vb[i]);
  EXPECT_TRUE(AllClose(Read(exp(bt)), want, TolFor(DType::kF32, true)))
      << "exp non-contiguous";
  for (int64_t i = 0; i < n; ++i) want[i] = va[i] + vr[i % 300];
  EXPECT_TRUE(AllClose(Read(add(a, row)), want, TolFor(DType::kF32)))
      << "add broadcast";
  for (int64_t i = 0; i < n; ++i) want[i] = va[i] / vb[i];
  EXPECT_TRUE(AllClose(Read(div(a, bt)), want, TolFor(DType::kF32)))
      << "div non-contiguous";
  for (int64_t i = 0; i < n; ++i) want[i] = va[i] > vb[i] ? 1 : 0;
  const Tensor c = gt(a, bt);
  EXPECT_TRUE(AllClose(Read(c), want, {0, 0})) << "gt";
  for (int64_t i = 0; i < n; ++i) want[i] = va[i] > vb[i] ? va[i] : vr[i % 300];
  EXPECT_TRUE(AllClose(Read(where(c, a, row)), want, {0, 0})) << "where";
  for (int64_t i = 0; i < n; ++i) want[i] = RoundBF16(vb[i]);
  EXPECT_TRUE(AllClose(Read(cast(bt, DType::kBF16)), want, {0, 0}))
      << "cast to bf16";
  Tensor acc = a.clone();
  acc.add_(bt, 2.0);
  for (int64_t i = 0; i < n; ++i) want[i] = va[i] + 2 * vb[i];
  EXPECT_TRUE(AllClose(Read(acc), want, TolFor(DType::kF32))) << "add_";
}

TEST(LargeTensorTest, Reductions) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    // [150, 1000] over dim 0 runs the leading-dims kernel on several threads.
    const Tensor x = RandomTensor({400, 300}, dt, -2, 2, 161);
    const Tensor xt = RandomTensor({300, 400}, dt, -2, 2, 162).t();
    const Tensor wide = RandomTensor({150, 1000}, dt, -2, 2, 163);
    for (const Tensor& in : {x, xt, wide}) {
      const Values v = Read(in);
      for (const Dims& dims : {Dims{0}, Dims{1}, Dims{}}) {
        Dims shape;
        const auto groups =
            Groups(v, ShapeOf(in), NormalizeDims(dims, 2), false, &shape);
        for (Red r : {Red::kSum, Red::kMean, Red::kAmax, Red::kVar1}) {
          Values want;
          for (const auto& g : groups) want.push_back(RefReduce(r, g));
          EXPECT_TRUE(
              AllClose(Read(CallReduce(r, in, dims, false)), want, TolFor(dt)))
              << RedName(r) << " " << Name(dt) << " dims " << DimsString(dims);
        }
        if (dims.size() == 1) {
          Values want;
          for (const auto& g : groups)
            want.push_back(std::max_element(g.begin(), g.end()) - g.begin());
          EXPECT_TRUE(AllClose(Read(argmax(in, dims[0])), want, {0, 0}))
              << "argmax";
        }
      }
    }
  }
}

TEST(LargeTensorTest, SoftmaxLayerNormCrossEntropyMatmul) {
  const Tensor x = RandomTensor({300, 400}, DType::kF32, -4, 4, 171);
  const Values v = Read(x);
  EXPECT_TRUE(AllClose(Read(softmax(x, 1)), RefSoftmax(v, {300, 400}, 1, false),
                       TolFor(DType::kF32, true)));
  EXPECT_TRUE(AllClose(Read(log_softmax(x, 0)),
                       RefSoftmax(v, {300, 400}, 0, true),
                       TolFor(DType::kF32, true)));
  const Tensor w = RandomTensor({400}, DType::kF32, 0.5, 1.5, 172);
  const Tensor b = RandomTensor({400}, DType::kF32, -1, 1, 173);
  const Values vw = Read(w), vb = Read(b);
  EXPECT_TRUE(AllClose(Read(layer_norm(x, {400}, w, b)),
                       RefLayerNorm(v, 400, &vw, &vb, 1e-5),
                       TolFor(DType::kF32, true)));
  // cross_entropy over 2000 rows of 64 classes.
  const Tensor logits = RandomTensor({2000, 64}, DType::kF32, -4, 4, 174);
  Values t(2000);
  for (int i = 0; i < 2000; ++i) t[i] = (i * 37) % 64;
  const Values rows = RefCrossEntropyRows(Read(logits), t, 64, 0.1);
  EXPECT_TRUE(AllClose(
      Read(cross_entropy(logits, Make(t, {2000}, DType::kI64), "none", 0.1)),
      rows, TolFor(DType::kF32, true)));
  double total = 0;
  for (double r : rows) total += r;
  EXPECT_TRUE(AllClose(
      Read(cross_entropy(logits, Make(t, {2000}, DType::kI64), "mean", 0.1)),
      {total / 2000}, TolFor(DType::kF32, true)));
  // A [300, 400] x [400, 350] product (105k outputs) in f32 and f64.
  for (DType dt : {DType::kF32, DType::kF64}) {
    CheckMatmul(RandomTensor({300, 400}, dt, -1, 1, 175),
                RandomTensor({350, 400}, dt, -1, 1, 176), false, true);
  }
}

TEST(LargeTensorTest, EmbeddingAndMseLoss) {
  const Tensor w = RandomTensor({1000, 128}, DType::kF32, -1, 1, 181);
  Values idx(1024);
  for (int i = 0; i < 1024; ++i) idx[i] = (i * 7919) % 1000;
  const Tensor out = embedding(w, Make(idx, {1024}, DType::kI64));
  const Values vw = Read(w), vo = Read(out);
  for (int i = 0; i < 1024; ++i) {
    for (int j = 0; j < 128; ++j)
      ASSERT_EQ(vo[i * 128 + j], vw[idx[i] * 128 + j]);
  }
  const Tensor a = RandomTensor({500, 300}, DType::kF32, -1, 1, 182);
  const Tensor b = RandomTensor({500, 300}, DType::kF32, -1, 1, 183);
  const Values va = Read(a), vb = Read(b);
  double s = 0;
  for (size_t i = 0; i < va.size(); ++i) s += (va[i] - vb[i]) * (va[i] - vb[i]);
  EXPECT_TRUE(
      AllClose(Read(mse_loss(a, b)), {s / va.size()}, TolFor(DType::kF32)));
}

// ---------------------------------------------------------------------------
// cat, and stack/split/chunk built on it and on slices.

TEST(CatTest, JoinsAlongADimInEveryDType) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI64}) {
    const Tensor a = Make({1, 2, 3, 4, 5, 6}, {2, 3}, dt);
    const Tensor b = Make({7, 8}, {2, 1}, dt);
    const Tensor c = cat({a, b}, 1);
    EXPECT_EQ(c.dtype(), dt);
    EXPECT_EQ(c.shape(), (Shape{2, 4}));
    EXPECT_TRUE(AllClose(Read(c), {1, 2, 3, 7, 4, 5, 6, 8}, {0, 0}))
        << Name(dt);
    const Tensor r = cat({a, a.slice(0, 1, 2)}, -2);  // a strided operand
    EXPECT_EQ(r.shape(), (Shape{3, 3}));
    EXPECT_TRUE(AllClose(Read(r), {1, 2, 3, 4, 5, 6, 4, 5, 6}, {0, 0}))
        << Name(dt);
  }
  // Operands of different dtypes: the widest, as for binary ops.
  const Tensor mixed =
      cat({Make({1.5}, {1}, DType::kBF16), Make({2.25}, {1}, DType::kF32)});
  EXPECT_EQ(mixed.dtype(), DType::kF32);
  EXPECT_TRUE(AllClose(Read(mixed), {1.5, 2.25}, {0, 0}));
  // Empty operands take no room; a single operand is a copy.
  EXPECT_TRUE(AllClose(Read(cat({Make({}, {0, 2}), Make({1, 2}, {1, 2})})),
                       {1, 2}, {0, 0}));
  const Tensor one = Make({3, 4}, {2});
  const Tensor copy = cat({one});
  EXPECT_FALSE(copy.is_same(one));
  EXPECT_TRUE(AllClose(Read(copy), {3, 4}, {0, 0}));
}

TEST(CatTest, RefusesMismatchedOperands) {
  ExpectError([] { cat({}); }, {"cat", "at least one"});
  ExpectError(
      [] {
        cat({Make({1, 2}, {2}), Make({1, 2, 3, 4}, {2, 2})});
      },
      {"cat", "operand 1", "[2, 2]", "[2]"});
  ExpectError(
      [] {
        cat({Make({1, 2}, {1, 2}), Make({1, 2, 3}, {1, 3})}, 0);
      },
      {"cat", "operand 1", "[1, 3]", "outside dim 0"});
  ExpectError([] { cat({Make({1, 2}, {2})}, 1); }, {"cat", "dim 1", "rank 1"});
  ExpectError([] { cat({Make({1}, {})}); }, {"cat", "a dim to join along"});
}

TEST(CatTest, StackSplitAndChunk) {
  const Tensor a = Make({1, 2, 3}, {3}), b = Make({4, 5, 6}, {3});
  const Tensor s0 = stack({a, b});
  EXPECT_EQ(s0.shape(), (Shape{2, 3}));
  EXPECT_TRUE(AllClose(Read(s0), {1, 2, 3, 4, 5, 6}, {0, 0}));
  const Tensor s1 = stack({a, b}, -1);
  EXPECT_EQ(s1.shape(), (Shape{3, 2}));
  EXPECT_TRUE(AllClose(Read(s1), {1, 4, 2, 5, 3, 6}, {0, 0}));
  ExpectError(
      [&] {
        stack({a, Make({1, 2}, {2})});
      },
      {"stack", "tensor 1", "[2]", "[3]"});
  ExpectError([&] { stack({a}, 2); }, {"stack", "dim 2"});

  const Tensor x = Make({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5});
  const std::vector<Tensor> parts = split(x, 2, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{2, 1}));
  EXPECT_TRUE(AllClose(Read(parts[1]), {2, 3, 7, 8}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(parts[2]), {4, 9}, {0, 0}));
  EXPECT_TRUE(AllClose(Read(cat(parts, 1)), Read(x), {0, 0}));
  // PyTorch's chunk sizes: ceil(n / chunks), fewer chunks when n runs out.
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> chunks = {
      {1, {5}},       {2, {3, 2}},          {3, {2, 2, 1}},
      {4, {2, 2, 1}}, {5, {1, 1, 1, 1, 1}}, {7, {1, 1, 1, 1, 1}}};
  for (const auto& [n, sizes] : chunks) {
    const std::vector<Tensor> c = chunk(x, n, -1);
    std::vector<int64_t> got;
    for (const Tensor& t : c) got.push_back(t.shape()[1]);
    EXPECT_EQ(got, sizes) << "chunk(x, " << n << ")";
  }
  ExpectError([&] { split(x, 0, 1); }, {"split", "split_size", "0"});
  ExpectError([&] { chunk(x, 0); }, {"chunk", "chunks", "0"});
  ExpectError([&] { split(x, 1, 2); }, {"split", "dim 2", "rank 2"});
}

// ---------------------------------------------------------------------------
// Every op of the table has forward tests above; a new row must be added here.

TEST(OpCoverageTest, EveryOpInTheTableIsCovered) {
  const std::set<std::string> covered = {
      "neg", "abs", "sign", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh",
      "erf", "sigmoid", "relu", "gelu", "gelu_tanh", "silu", "sin", "cos",
      "cast", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq",
      "ne", "lt", "le", "gt", "ge", "where", "sum", "mean", "amax", "argmax",
      "var", "softmax", "log_softmax", "layer_norm", "cross_entropy",
      "mse_loss", "matmul", "reshape", "permute", "slice", "expand", "squeeze",
      "unsqueeze", "contiguous", "embedding", "embedding_backward",
      "slice_backward", "one_hot", "cat", "topk", "multinomial", "full",
      "arange", "rand", "randn", "randint", "dropout", "add_", "mul_",
      "addcmul_", "addcdiv_", "lerp_", "copy_", "fill_",
      // tests/dist/collectives_test.cc, on
      // one rank and on two (ctest dist.*)
      "all_reduce", "broadcast", "all_gather", "barrier"};
  const char* table[] = {
#define OP(e, text, lo, hi, kind, amp, flags) text,
#include "ir/ops.def"
  };
  for (const char* op : table)
    EXPECT_TRUE(covered.count(op)) << op << " has no forward test";
  EXPECT_EQ(std::size(table), covered.size());
}

}  // namespace
}  // namespace stepjit
