// Unary and binary elementwise ops, comparisons, where and casts, against the
// float64 references of tests/runtime/ops/op_reference.h (tolerances there).
#include "tests/runtime/ops/op_reference.h"

namespace stepjit::op_test {
namespace {

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
                         CaseAndDTypeName());

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
                         CaseAndDTypeName());

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

// where moves each element's bits: every element size (bool and the 16-,
// 32- and 64-bit types), contiguous runs long enough for the vector loop and
// its tail, and NaNs, infinities and signed zeros kept exactly.
TEST(WhereTest, EveryElementSizeKeepsItsBitsExactly) {
  const int64_t n = 1000;
  Values cv(n), av(n), bv(n);
  for (int64_t i = 0; i < n; ++i) {
    cv[i] = (i * 7 % 3) == 0;
    av[i] = (i % 5 == 0) ? -0.0 : static_cast<double>(i) * 0.25 - 31;
    bv[i] = (i % 11 == 0) ? std::numeric_limits<double>::infinity()
                          : static_cast<double>(i % 17) - 8;
  }
  const Tensor cond = Make(cv, {n}, DType::kBool);
  for (DType dt : {DType::kBool, DType::kBF16, DType::kF16, DType::kF32,
                   DType::kI32, DType::kF64, DType::kI64}) {
    const Tensor a = Make(av, {n}, DType::kF64).to(dt);
    const Tensor b = Make(bv, {n}, DType::kF64).to(dt);
    const Tensor out = where(cond, a, b);
    ASSERT_EQ(out.dtype(), dt);
    const Values va = Read(a), vb = Read(b), vo = Read(out);
    for (int64_t i = 0; i < n; ++i) {
      const double want = cv[i] != 0 ? va[i] : vb[i];
      EXPECT_TRUE(vo[i] == want || (std::isnan(vo[i]) && std::isnan(want)))
          << ir::DTypeName(dt) << " element " << i << ": " << vo[i] << " vs "
          << want;
      if (vo[i] == 0) {
        EXPECT_EQ(std::signbit(vo[i]), std::signbit(want))
            << ir::DTypeName(dt) << " signed zero at " << i;
      }
    }
  }
  const Tensor nan = full({n}, std::numeric_limits<double>::quiet_NaN());
  const Values vn = Read(where(cond, nan, zeros({n})));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(std::isnan(vn[i]), cv[i] != 0) << i;
}

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

}  // namespace
}  // namespace stepjit::op_test
