// Checks the gradient rule of every differentiable op (kDiff in ir/ops.def)
// against central finite differences in float64, and the autograd engine's
// semantics: accumulation, fan-in, no_grad, in-place checks and .grad aliasing.
//
// GradCheck(fn, inputs) backpropagates L = sum(fn(inputs) * w) for fixed random
// weights w and compares each input's .grad with (L(x + eps) - L(x - eps)) /
// 2eps, eps = 1e-6, elementwise within |analytic - numeric| <= 1e-6 + 1e-6
// |numeric|. The truncation error of central differences is O(eps^2) = 1e-12
// and the rounding error about 1e-16 * |L| / eps ~ 1e-9 for these sizes, so
// 1e-6 leaves a wide margin while catching any wrong formula. Inputs stay away
// from kinks
// (|x| >= 0.1 for abs/relu/sign) and ties (maximum/minimum/amax).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/op.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "tests/util/expect_error.h"
#include "training/nn/functional.h"

namespace stepjit {
namespace {

using ::testing::HasSubstr;
using Values = std::vector<double>;
using Dims = std::vector<int64_t>;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

int64_t Numel(const Dims& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
Dims ShapeOf(const Tensor& t) {
  return Dims(t.shape().begin(), t.shape().end());
}

// Row-major elements of any strided f64 or f32 view.
Values Read(const Tensor& t) {
  EXPECT_TRUE(t.dtype() == DType::kF64 || t.dtype() == DType::kF32);
  Values out(t.numel());
  const char* base = static_cast<const char*>(t.storage()->data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t rem = i, off = t.offset();
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      off += (rem % t.shape()[d]) * t.strides()[d];
      rem /= t.shape()[d];
    }
    if (t.dtype() == DType::kF64) {
      std::memcpy(&out[i], base + off * 8, 8);
    } else {
      float f;
      std::memcpy(&f, base + off * 4, 4);
      out[i] = f;
    }
  }
  return out;
}

Tensor F64(const Values& v, const Dims& shape) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), Numel(shape));
  Tensor t = empty(shape, {.dtype = DType::kF64});
  std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(double));
  return t;
}
Tensor I64(const std::vector<int64_t>& v, const Dims& shape) {
  Tensor t = empty(shape, {.dtype = DType::kI64});
  std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

Values Uniform(int64_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Values v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
// |values| in [lo, hi] with random signs (away from zero).
Values SignedAway(int64_t n, double lo, double hi, uint64_t seed) {
  Values v = Uniform(n, lo, hi, seed);
  const Values s = Uniform(n, -1, 1, seed + 1000);
  for (int64_t i = 0; i < n; ++i) v[i] = s[i] < 0 ? -v[i] : v[i];
  return v;
}

// A float64 leaf that requires grad.
Tensor Leaf(const Values& v, const Dims& shape) {
  Tensor t = F64(v, shape);
  t.set_requires_grad(true);
  return t;
}
Tensor RandLeaf(const Dims& shape, double lo, double hi, uint64_t seed) {
  return Leaf(Uniform(Numel(shape), lo, hi, seed), shape);
}

struct GradCheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-6;
};

::testing::AssertionResult GradCheck(const Fn& fn,
                                     const std::vector<Tensor>& inputs,
                                     GradCheckOptions opt = {}) {
  for (const Tensor& x : inputs) {
    if (x.requires_grad()) x.set_grad(Tensor());
  }
  const Tensor out = fn(inputs);
  if (!out.requires_grad())
    return ::testing::AssertionFailure() << "output does not require grad";
  Values w = Uniform(out.numel(), 0.5, 1.5, 4242);
  for (size_t i = 1; i < w.size(); i += 2) w[i] = -w[i];
  sum(mul(out, F64(w, ShapeOf(out)))).backward();

  auto loss = [&] {
    NoGradGuard no_grad;
    const Values o = Read(fn(inputs));
    double s = 0;
    for (size_t k = 0; k < o.size(); ++k) s += o[k] * w[k];
    return s;
  };
  std::ostringstream errors;
  errors.precision(12);
  int bad = 0;
  int checked = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.requires_grad()) continue;
    ++checked;
    if (x.dtype() != DType::kF64 || !x.is_contiguous()) {
      return ::testing::AssertionFailure()
             << "input " << i << " must be a contiguous f64 leaf";
    }
    const Tensor g = x.grad();
    Values analytic(x.numel(), 0.0);  // no gradient reached it: zero
    if (g.defined()) {
      if (ShapeOf(g) != ShapeOf(x) || g.dtype() != x.dtype()) {
        return ::testing::AssertionFailure()
               << "input " << i << ": grad " << g.ToString()
               << " does not match " << ir::ShapeToString(x.shape());
      }
      analytic = Read(g);
    }
    double* p = x.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double orig = p[j];
      p[j] = orig + opt.eps;
      const double plus = loss();
      p[j] = orig - opt.eps;
      const double minus = loss();
      p[j] = orig;
      const double numeric = (plus - minus) / (2 * opt.eps);
      if (std::fabs(analytic[j] - numeric) >
              opt.atol + opt.rtol * std::fabs(numeric) &&
          bad++ < 8) {
        errors << "\n  input " << i << " element " << j << ": analytic "
               << analytic[j] << " numeric " << numeric;
      }
    }
  }
  if (checked == 0)
    return ::testing::AssertionFailure() << "no input requires grad";
  if (bad > 0) {
    return ::testing::AssertionFailure()
           << bad << " gradient elements differ:" << errors.str();
  }
  return ::testing::AssertionSuccess();
}

using test::ExpectError;

// The harness itself must reject a wrong gradient: x * detach(x) backpropagates
// x where d/dx x^2 = 2x.
TEST(GradCheckHarnessTest, RejectsAWrongGradient) {
  const Tensor x = RandLeaf({2, 3}, 0.5, 2, 3);
  EXPECT_FALSE(
      GradCheck([](const auto& in) { return in[0] * in[0].detach(); }, {x}));
  EXPECT_TRUE(GradCheck([](const auto& in) { return in[0] * in[0]; }, {x}));
}

// ---------------------------------------------------------------------------
// Unary ops, on a contiguous input and through a transposed view.

struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double lo, hi;
  bool away_from_zero;  // sample |x| in [lo, hi] with random signs
};
void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.name; }

const UnaryCase kUnaryCases[] = {
    {"neg", [](const Tensor& x) { return neg(x); }, -2, 2, false},
    {"abs", [](const Tensor& x) { return abs(x); }, 0.1, 2, true},
    {"sign", [](const Tensor& x) { return sign(x); }, 0.1, 2, true},
    {"exp", [](const Tensor& x) { return exp(x); }, -2, 2, false},
    {"log", [](const Tensor& x) { return log(x); }, 0.3, 3, false},
    {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0.3, 3, false},
    {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.3, 3, false},
    {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, 0.3, 3, true},
    {"tanh", [](const Tensor& x) { return tanh(x); }, -2, 2, false},
    {"erf", [](const Tensor& x) { return erf(x); }, -2, 2, false},
    {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -3, 3, false},
    {"relu", [](const Tensor& x) { return relu(x); }, 0.1, 2, true},
    {"gelu", [](const Tensor& x) { return gelu(x); }, -3, 3, false},
    {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, -3, 3,
     false},
    {"silu", [](const Tensor& x) { return silu(x); }, -3, 3, false},
    {"sin", [](const Tensor& x) { return sin(x); }, -3, 3, false},
    {"cos", [](const Tensor& x) { return cos(x); }, -3, 3, false},
};

class UnaryGradTest : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryGradTest, MatchesFiniteDifferences) {
  const UnaryCase& c = GetParam();
  const Values v = c.away_from_zero ? SignedAway(12, c.lo, c.hi, 1)
                                    : Uniform(12, c.lo, c.hi, 1);
  const Tensor x = Leaf(v, {3, 4});
  EXPECT_TRUE(GradCheck([&](const auto& in) { return c.fn(in[0]); }, {x}))
      << c.name;
  EXPECT_TRUE(GradCheck([&](const auto& in) { return c.fn(in[0].t()); }, {x}))
      << c.name << " of a transposed view";
}

INSTANTIATE_TEST_SUITE_P(AllUnaryOps, UnaryGradTest,
                         ::testing::ValuesIn(kUnaryCases),
                         [](const auto& info) {
                           return std::string(info.param.name);
                         });

// ---------------------------------------------------------------------------
// Binary ops with broadcasting: gradients are summed back to each input shape.

struct BinaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  double alo, ahi, blo, bhi;
  bool no_ties;  // a on a 0.2 grid, b on the grid shifted by 0.1
};
void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.name; }

const BinaryCase kBinaryCases[] = {
    {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, -2, 2,
     -2, 2, false},
    {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, -2, 2,
     -2, 2, false},
    {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, -2, 2,
     -2, 2, false},
    {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, -2, 2,
     0.5, 2, false},
    {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.5, 2,
     -1.5, 1.5, false},
    {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
     -2, 2, -2, 2, true},
    {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
     -2, 2, -2, 2, true},
};

Values OperandValues(const BinaryCase& c, bool first, int64_t n,
                     uint64_t seed) {
  Values v =
      first ? Uniform(n, c.alo, c.ahi, seed) : Uniform(n, c.blo, c.bhi, seed);
  if (c.no_ties) {
    for (auto& x : v) x = std::round(x * 5) / 5 + (first ? 0.0 : 0.1);
  }
  return v;
}

class BinaryGradTest : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(BinaryGradTest, BroadcastShapesAndZeroDim) {
  const BinaryCase& c = GetParam();
  const std::pair<Dims, Dims> shapes[] = {{{2, 1, 4}, {3, 1}},
                                          {{3, 4}, {}},
                                          {{}, {3, 4}},
                                          {{4}, {2, 3, 4}},
                                          {{2, 3}, {2, 3}}};
  uint64_t seed = 10;
  for (const auto& [sa, sb] : shapes) {
    const Tensor a = Leaf(OperandValues(c, true, Numel(sa), ++seed), sa);
    const Tensor b = Leaf(OperandValues(c, false, Numel(sb), ++seed), sb);
    EXPECT_TRUE(
        GradCheck([&](const auto& in) { return c.fn(in[0], in[1]); }, {a, b}))
        << c.name << " " << ir::ShapeToString(a.shape()) << " with "
        << ir::ShapeToString(b.shape());
  }
}

TEST_P(BinaryGradTest, OnlyOneOperandRequiresGrad) {
  const BinaryCase& c = GetParam();
  const Tensor a = Leaf(OperandValues(c, true, 6, 30), {2, 3});
  const Tensor b = F64(OperandValues(c, false, 3, 31), {3});
  EXPECT_TRUE(
      GradCheck([&](const auto& in) { return c.fn(in[0], in[1]); }, {a, b}))
      << c.name;
  const Tensor a2 = F64(OperandValues(c, true, 6, 32), {2, 3});
  const Tensor b2 = Leaf(OperandValues(c, false, 3, 33), {3});
  EXPECT_TRUE(
      GradCheck([&](const auto& in) { return c.fn(in[0], in[1]); }, {a2, b2}))
      << c.name;
  EXPECT_FALSE(a2.grad().defined());
}

INSTANTIATE_TEST_SUITE_P(AllBinaryOps, BinaryGradTest,
                         ::testing::ValuesIn(kBinaryCases),
                         [](const auto& info) {
                           return std::string(info.param.name);
                         });

TEST(BinaryGradExtraTest, PowWithScalarExponentAndScalarOperators) {
  const Tensor x = RandLeaf({2, 3}, 0.5, 2, 40);
  EXPECT_TRUE(GradCheck([](const auto& in) { return pow(in[0], 3.0); }, {x}));
  EXPECT_TRUE(GradCheck([](const auto& in) { return pow(in[0], -0.5); }, {x}));
  EXPECT_TRUE(GradCheck(
      [](const auto& in) { return 2.0 / in[0] - in[0] * 3.0 + 1.0; }, {x}));
}

TEST(WhereGradTest, GradientsFollowTheCondition) {
  std::vector<bool> bits = {true, false, false, true, true, true, false, false};
  Tensor cond = empty({2, 1, 4}, {.dtype = DType::kBool});
  for (int i = 0; i < 8; ++i) cond.data<bool>()[i] = bits[i];
  const Tensor a = RandLeaf({3, 1}, -2, 2, 50);
  const Tensor b = RandLeaf({2, 3, 4}, -2, 2, 51);
  EXPECT_TRUE(GradCheck(
      [&](const auto& in) { return where(cond, in[0], in[1]); }, {a, b}));
  const Tensor s = RandLeaf({}, -2, 2, 52);
  EXPECT_TRUE(GradCheck(
      [&](const auto& in) { return where(cond, in[1], in[0]); }, {s, b}));
}

// ---------------------------------------------------------------------------
// Reductions.

TEST(ReductionGradTest, SumAndMeanOverAnyDims) {
  const Tensor x = RandLeaf({3, 4, 5}, -2, 2, 60);
  for (const Dims& dims :
       {Dims{0, 2}, Dims{1}, Dims{-1}, Dims{}, Dims{0, 1, 2}}) {
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(GradCheck(
          [&](const auto& in) { return sum(in[0], dims, keepdim); }, {x}))
          << "sum keepdim " << keepdim;
      EXPECT_TRUE(GradCheck(
          [&](const auto& in) { return mean(in[0], dims, keepdim); }, {x}))
          << "mean keepdim " << keepdim;
    }
  }
  // Of a permuted (non-contiguous) view.
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        return mean(in[0].permute({2, 0, 1}), {0, 2});
      },
      {x}));
}

TEST(ReductionGradTest, AmaxWithoutTies) {
  const Tensor x =
      RandLeaf({3, 4, 5}, -2, 2, 61);  // continuous values: no ties
  for (const Dims& dims : {Dims{1}, Dims{0, 2}, Dims{}, Dims{-1}}) {
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(GradCheck(
          [&](const auto& in) { return amax(in[0], dims, keepdim); }, {x}))
          << "keepdim " << keepdim;
    }
  }
}

TEST(ReductionGradTest, AmaxTiesShareTheGradient) {
  // PyTorch splits amax's gradient evenly among tied maxima.
  const Tensor x = Leaf({1, 3, 3, 2}, {4});
  amax(x).backward();
  EXPECT_EQ(Read(x.grad()), (Values{0, 0.5, 0.5, 0}));
}

TEST(ReductionGradTest, VarianceWithCorrectionZeroAndOne) {
  const Tensor x = RandLeaf({3, 4, 5}, -2, 2, 62);
  for (int64_t correction : {0, 1}) {
    for (const Dims& dims : {Dims{1}, Dims{0, 2}, Dims{}}) {
      for (bool keepdim : {false, true}) {
        EXPECT_TRUE(GradCheck(
            [&](const auto& in) {
              return var(in[0], dims, correction, keepdim);
            },
            {x}))
            << "correction " << correction << " keepdim " << keepdim;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Normalizations and losses.

TEST(NormalizationGradTest, SoftmaxAndLogSoftmaxOverEachDim) {
  const Tensor x = RandLeaf({3, 4}, -2, 2, 70);
  for (int64_t dim : {0, 1, -1}) {
    EXPECT_TRUE(
        GradCheck([&](const auto& in) { return softmax(in[0], dim); }, {x}))
        << dim;
    EXPECT_TRUE(
        GradCheck([&](const auto& in) { return log_softmax(in[0], dim); }, {x}))
        << dim;
  }
  const Tensor y = RandLeaf({2, 3, 4}, -2, 2, 71);
  EXPECT_TRUE(GradCheck([](const auto& in) { return softmax(in[0], 1); }, {y}));
  EXPECT_TRUE(GradCheck(
      [](const auto& in) { return log_softmax(in[0].transpose(0, 2), 0); },
      {y}));
}

TEST(NormalizationGradTest, LayerNormInputWeightAndBias) {
  const Tensor x = RandLeaf({2, 3, 4}, -2, 2, 72);
  const Tensor w = RandLeaf({4}, 0.5, 1.5, 73), b = RandLeaf({4}, -1, 1, 74);
  EXPECT_TRUE(
      GradCheck([](const auto& in) { return layer_norm(in[0], {4}); }, {x}));
  EXPECT_TRUE(GradCheck(
      [](const auto& in) { return layer_norm(in[0], {4}, in[1]); }, {x, w}));
  EXPECT_TRUE(GradCheck(
      [](const auto& in) { return layer_norm(in[0], {4}, in[1], in[2]); },
      {x, w, b}));
  const Tensor w2 = RandLeaf({3, 4}, 0.5, 1.5, 75),
               b2 = RandLeaf({3, 4}, -1, 1, 76);
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        return layer_norm(in[0], {3, 4}, in[1], in[2]);
      },
      {x, w2, b2}));
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        return layer_norm(in[0], {3, 4}, Tensor(), Tensor(), 0.1);
      },
      {x}));
}

TEST(LossGradTest, CrossEntropyReductionsAndLabelSmoothing) {
  const Tensor logits = RandLeaf({4, 5}, -2, 2, 80);
  const Tensor targets = I64({1, 0, 4, 1}, {4});
  for (const char* reduction : {"mean", "sum", "none"}) {
    for (double ls : {0.0, 0.1}) {
      EXPECT_TRUE(GradCheck(
          [&](const auto& in) {
            return cross_entropy(in[0], targets, reduction, ls);
          },
          {logits}))
          << reduction << " label_smoothing " << ls;
    }
  }
}

TEST(LossGradTest, MseLossBothArguments) {
  const Tensor a = RandLeaf({3, 4}, -2, 2, 81), b = RandLeaf({3, 4}, -2, 2, 82);
  for (const char* reduction : {"mean", "sum", "none"}) {
    EXPECT_TRUE(GradCheck(
        [&](const auto& in) { return mse_loss(in[0], in[1], reduction); },
        {a, b}))
        << reduction;
  }
}

// ---------------------------------------------------------------------------
// Matmul.

TEST(MatmulGradTest, AllTransposeCombinations) {
  const int64_t m = 3, k = 4, n = 2;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = RandLeaf(ta ? Dims{k, m} : Dims{m, k}, -1, 1, 90);
      const Tensor b = RandLeaf(tb ? Dims{n, k} : Dims{k, n}, -1, 1, 91);
      EXPECT_TRUE(GradCheck(
          [&](const auto& in) { return matmul(in[0], in[1], ta, tb); }, {a, b}))
          << "ta " << ta << " tb " << tb;
    }
  }
}

TEST(MatmulGradTest, BatchedAndBroadcastBatch) {
  const Tensor a = RandLeaf({2, 3, 4, 5}, -1, 1, 92),
               b = RandLeaf({5, 6}, -1, 1, 93);
  EXPECT_TRUE(
      GradCheck([](const auto& in) { return matmul(in[0], in[1]); }, {a, b}));
  const Tensor c = RandLeaf({3, 1, 4, 5}, -1, 1, 94),
               d = RandLeaf({2, 5, 6}, -1, 1, 95);
  EXPECT_TRUE(
      GradCheck([](const auto& in) { return matmul(in[0], in[1]); }, {c, d}));
  const Tensor e = RandLeaf({2, 5, 4}, -1, 1, 96),
               f = RandLeaf({3, 1, 6, 5}, -1, 1, 97);
  EXPECT_TRUE(GradCheck(
      [](const auto& in) { return matmul(in[0], in[1], true, true); }, {e, f}));
  // A transposed view as the left operand.
  const Tensor g = RandLeaf({5, 3}, -1, 1, 98), h = RandLeaf({5, 2}, -1, 1, 99);
  EXPECT_TRUE(GradCheck([](const auto& in) { return matmul(in[0].t(), in[1]); },
                        {g, h}));
}

// ---------------------------------------------------------------------------
// Views and data movement.

TEST(ViewGradTest, ReshapePermuteSliceExpandSqueezeUnsqueezeContiguous) {
  const Tensor x = RandLeaf({2, 3, 4}, -2, 2, 100);
  const std::pair<const char*, Fn> cases[] = {
      {"reshape",
       [](const auto& in) {
         return in[0].reshape({6, 4});
       }},
      {"reshape of a transpose (copies)",
       [](const auto& in) { return in[0].transpose(0, 2).reshape({-1}); }},
      {"view",
       [](const auto& in) {
         return in[0].view({4, 6});
       }},
      {"flatten", [](const auto& in) { return in[0].flatten(1); }},
      {"permute",
       [](const auto& in) {
         return in[0].permute({2, 0, 1});
       }},
      {"slice step 2", [](const auto& in) { return in[0].slice(2, 0, 4, 2); }},
      {"slice negative start",
       [](const auto& in) { return in[0].slice(1, -2, 3); }},
      {"slice of slice",
       [](const auto& in) { return in[0].slice(2, 1, 4).slice(1, 0, 3, 2); }},
      {"expand",
       [](const auto& in) {
         return in[0].slice(2, 0, 1).expand({5, 2, 3, 3});
       }},
      {"unsqueeze 0", [](const auto& in) { return in[0].unsqueeze(0); }},
      {"unsqueeze -1", [](const auto& in) { return in[0].unsqueeze(-1); }},
      {"squeeze all",
       [](const auto& in) { return in[0].slice(1, 1, 2).squeeze(); }},
      {"squeeze dim",
       [](const auto& in) { return in[0].slice(1, 1, 2).squeeze(1); }},
      {"contiguous",
       [](const auto& in) { return in[0].transpose(0, 1).contiguous(); }},
      {"clone", [](const auto& in) { return in[0].clone(); }},
  };
  for (const auto& [name, fn] : cases) EXPECT_TRUE(GradCheck(fn, {x})) << name;
  // expand of a [3, 1] operand into a broadcast product.
  const Tensor y = RandLeaf({3, 1}, -2, 2, 101);
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        return in[0].expand({2, 3, 4}) * 1.5;
      },
      {y}));
}

// conv2d's input, weight and bias gradients over strides, paddings,
// dilations and groups; the pools' (values far enough apart that finite
// differences never cross a max tie).
TEST(ConvolutionGradTest, Conv2dInputWeightAndBias) {
  struct Case {
    Conv2dOptions options;
    int64_t kh, kw;
  };
  const Case cases[] = {
      {{}, 3, 3},
      {{.stride = {2, 1}, .padding = {1, 0}}, 3, 2},
      {{.stride = {1, 2}, .padding = {1, 1}, .dilation = {2, 1}, .groups = 2},
       2,
       3}};
  uint64_t seed = 900;
  for (const Case& c : cases) {
    const Tensor x = RandLeaf({2, 4, 5, 6}, -1, 1, ++seed);
    const Tensor w =
        RandLeaf({4, 4 / c.options.groups, c.kh, c.kw}, -1, 1, ++seed);
    const Tensor b = RandLeaf({4}, -1, 1, ++seed);
    const Conv2dOptions o = c.options;
    EXPECT_TRUE(GradCheck(
        [o](const auto& in) { return conv2d(in[0], in[1], in[2], o); },
        {x, w, b}));
    EXPECT_TRUE(GradCheck(
        [o](const auto& in) { return conv2d(in[0], in[1], Tensor(), o); },
        {x, w}));
  }
}

TEST(ConvolutionGradTest, MaxAndAvgPool) {
  // A permutation of distinct values: no two elements of a window are near.
  Values v(2 * 3 * 7 * 6);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>((i * 37) % v.size()) * 0.1;
  const Tensor x = Leaf(v, {2, 3, 7, 6});
  for (const Pool2dOptions& o : {Pool2dOptions{.kernel_size = {2, 2}},
                                 Pool2dOptions{.kernel_size = {3, 3},
                                 .stride = std::array<int64_t, 2>{2, 1},
                                 .padding = {1, 1},
                                 .ceil_mode = true},
                                 Pool2dOptions{.kernel_size = {3, 2},
                                 .stride = std::array<int64_t, 2>{2, 2},
                                 .padding = {1, 1},
                                 .count_include_pad = false}}) {
    EXPECT_TRUE(
        GradCheck([o](const auto& in) { return max_pool2d(in[0], o); }, {x}));
    EXPECT_TRUE(
        GradCheck([o](const auto& in) { return avg_pool2d(in[0], o); }, {x}));
  }
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        return adaptive_avg_pool2d(in[0], {1, 1});
      },
      {x}));
}

TEST(DataMovementGradTest, EmbeddingWeightGradAccumulatesRepeats) {
  const Tensor w = RandLeaf({5, 3}, -1, 1, 110);
  const Tensor idx = I64({4, 0, 4, 2, 4, 0}, {2, 3});
  EXPECT_TRUE(
      GradCheck([&](const auto& in) { return embedding(in[0], idx); }, {w}));
}

TEST(DataMovementGradTest, SliceBackward) {
  const Tensor g = RandLeaf({4, 2}, -1, 1, 111);
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        return slice_backward(in[0], {4, 6}, 1, 1, 5, 2);
      },
      {g}));
  const Tensor g0 = RandLeaf({2, 3}, -1, 1, 112);
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        return slice_backward(in[0], {5, 3}, 0, -3, 5, 2);
      },
      {g0}));
}

TEST(DataMovementGradTest, CatStackSplitChunk) {
  const Tensor a = RandLeaf({2, 3}, -1, 1, 113);
  const Tensor b = RandLeaf({2, 1}, -1, 1, 114);
  const Tensor c = RandLeaf({2, 4}, -1, 1, 115);
  EXPECT_TRUE(GradCheck([](const auto& in) { return cat(in, 1); }, {a, b, c}));
  EXPECT_TRUE(
      GradCheck([](const auto& in) { return cat(in, -1) * 2.0; }, {a, b}));
  const Tensor d = RandLeaf({3, 3}, -1, 1, 116);
  EXPECT_TRUE(GradCheck([](const auto& in) { return cat(in, 0); }, {a, d}));
  // One operand used twice: its gradient is the sum of its two windows.
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        return cat({in[0], in[1], in[0]}, 1);
      },
      {a, b}));
  const Tensor e = RandLeaf({2, 3}, -1, 1, 117);
  EXPECT_TRUE(GradCheck([](const auto& in) { return stack(in, 1); }, {a, e}));
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        std::vector<Tensor> p = split(in[0], 2, 1);  // [2,2], [2,2], [2,1]
        return p[0] * p[1] + sum(p[2]);
      },
      {RandLeaf({2, 5}, -1, 1, 118)}));
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        std::vector<Tensor> p = chunk(in[0], 3, 0);  // [2,3] x 3
        return cat({p[2], p[0] * p[1]}, 1);
      },
      {RandLeaf({6, 3}, -1, 1, 119)}));
}

// topk's values: each selected value's gradient lands on its position (the
// operands have distinct values, so finite differences do not reorder them),
// over the last dim, a middle dim, the smallest, and all elements (k = n).
TEST(DataMovementGradTest, TopkValuesScatterBackToTheirPositions) {
  const Tensor x = RandLeaf({3, 7}, -1, 1, 120);
  EXPECT_TRUE(GradCheck(
      [](const auto& in) { return topk(in[0], 3).values * 1.5; }, {x}));
  const Tensor y = RandLeaf({2, 5, 3}, -1, 1, 121);
  EXPECT_TRUE(GradCheck(
      [](const auto& in) { return topk(in[0], 2, 1, false).values; }, {y}));
  EXPECT_TRUE(
      GradCheck([](const auto& in) { return topk(in[0], 5, -2).values; }, {y}));
}

// tril, triu and masked_fill (where over position masks) and attention
// (matmul, scale, mask, softmax, matmul), through their ops' rules.
TEST(AttentionGradTest, MasksAndScaledDotProductAttention) {
  const Tensor x = RandLeaf({2, 3, 4}, -1, 1, 130);
  EXPECT_TRUE(GradCheck([](const auto& in) { return tril(in[0]); }, {x}));
  EXPECT_TRUE(
      GradCheck([](const auto& in) { return triu(in[0], 1) * 3.0; }, {x}));
  const Tensor mask =
      gt(F64({1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0}, {3, 4}), F64({0.5}, {}));
  EXPECT_TRUE(GradCheck(
      [&](const auto& in) { return masked_fill(in[0], mask, -2.0); }, {x}));
  const Tensor q = RandLeaf({2, 2, 4, 3}, -1, 1, 131);
  const Tensor k = RandLeaf({2, 2, 5, 3}, -1, 1, 132);
  const Tensor v = RandLeaf({2, 2, 5, 2}, -1, 1, 133);
  for (bool causal : {false, true}) {
    EXPECT_TRUE(GradCheck(
        [&](const auto& in) {
          return nn::functional::scaled_dot_product_attention(in[0], in[1],
                                                              in[2], causal);
        },
        {q, k, v}))
        << "causal " << causal;
  }
  const Tensor keys = gt(F64({1, 1, 0, 1, 1}, {1, 5}), F64({0.5}, {}));
  EXPECT_TRUE(GradCheck(
      [&](const auto& in) {
        return nn::functional::scaled_dot_product_attention(
            in[0], in[1], in[2], false, 0.0, keys, 0.7);
      },
      {q, k, v}));
}

TEST(DataMovementGradTest, DropoutGradIsTheForwardMaskScaled) {
  const double p = 0.3;
  const Tensor x = RandLeaf({20, 30}, 0.5, 1.5,
                            120);  // nonzero: a zero output means dropped
  Generator gen(77);
  const Tensor y = dropout(x, p, true, &gen);
  const Values w = Uniform(600, -1, 1, 121);
  sum(y * F64(w, {20, 30})).backward();
  const Values vy = Read(y), g = Read(x.grad());
  int64_t dropped = 0;
  for (int64_t i = 0; i < 600; ++i) {
    const double mask = vy[i] != 0 ? 1 : 0;
    dropped += vy[i] == 0;
    EXPECT_NEAR(g[i], w[i] * mask / (1 - p), 1e-12) << i;
  }
  EXPECT_GT(dropped, 100);  // Binomial(600, 0.3): mean 180, sd 11
  EXPECT_LT(dropped, 260);
  // With the generator reset inside fn the mask is fixed, so finite
  // differences apply too.
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        Generator local(78);
        return dropout(in[0], 0.5, true, &local);
      },
      {x}));
}

TEST(CastGradTest, ToSameDtypeIsExact) {
  const Tensor x = RandLeaf({3, 4}, -2, 2, 130);
  EXPECT_TRUE(GradCheck(
      [](const auto& in) { return cast(in[0], DType::kF64) * 2.0; }, {x}));
}

// Through f32 the forward loses precision (about 6e-8 relative), so eps = 1e-3
// and a tolerance of 1e-3 (rounding error ~1e-7 / 1e-3 = 1e-4 relative).
TEST(CastGradTest, ThroughF32WithLooserTolerance) {
  const Tensor x = RandLeaf({3, 4}, -2, 2, 131);
  const GradCheckOptions loose = {.eps = 1e-3, .atol = 1e-3, .rtol = 1e-3};
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        return cast(cast(in[0], DType::kF32), DType::kF64);
      },
      {x}, loose));
  EXPECT_TRUE(
      GradCheck([](const auto& in) { return sin(cast(in[0], DType::kF32)); },
                {x}, loose));
  EXPECT_EQ(x.grad().dtype(),
            DType::kF64);  // converted back to the leaf's dtype
}

TEST(CompositeGradTest, SmallMlpWithLayerNormAndCrossEntropy) {
  const Tensor x = F64(Uniform(12, -1, 1, 140), {4, 3});
  const Tensor w1 = RandLeaf({5, 3}, -1, 1, 141),
               b1 = RandLeaf({5}, -0.5, 0.5, 142);
  const Tensor g = RandLeaf({5}, 0.5, 1.5, 143),
               w2 = RandLeaf({5, 4}, -1, 1, 144);
  const Tensor t = I64({3, 0, 1, 3}, {4});
  EXPECT_TRUE(GradCheck(
      [&](const auto& in) {
        Tensor h = gelu(matmul(x, in[0], false, true) + in[1], "tanh");
        h = layer_norm(h, {5}, in[2]);
        return cross_entropy(matmul(h, in[3]), t, "mean", 0.1);
      },
      {w1, b1, g, w2}));
  const Tensor z = RandLeaf({2, 3}, 0.2, 2, 145);
  EXPECT_TRUE(GradCheck(
      [](const auto& in) {
        return in[0] * sin(in[0]) + exp(in[0]) / (in[0] * in[0] + 1.0);
      },
      {z}));
}

// ---------------------------------------------------------------------------
// Autograd semantics.

TEST(AutogradTest, GradientsAccumulateAcrossBackwardCalls) {
  const Tensor x = Leaf({1, -2, 3}, {3});
  sum(x * x).backward();
  EXPECT_EQ(Read(x.grad()), (Values{2, -4, 6}));
  sum(x * x).backward();
  EXPECT_EQ(Read(x.grad()), (Values{4, -8, 12}));
  sum(x * 3.0).backward();
  EXPECT_EQ(Read(x.grad()), (Values{7, -5, 15}));
}

TEST(AutogradTest, TensorUsedTwiceGetsTheSum) {
  const Tensor x = Leaf({1, -2, 3}, {3});
  sum(x * 2.0 + x * 3.0).backward();
  EXPECT_EQ(Read(x.grad()), (Values{5, 5, 5}));
  x.set_grad(Tensor());
  sum(x * x * x).backward();  // 3 x^2 through two fan-ins of one node
  EXPECT_EQ(Read(x.grad()), (Values{3, 12, 27}));
  x.set_grad(Tensor());
  const Tensor y = x * 2.0;   // a non-leaf used twice
  sum(y * y + y).backward();  // d/dx = (2y + 1) * 2
  EXPECT_EQ(Read(x.grad()), (Values{10, -14, 26}));
}

// sign() has a zero gradient; the path through it must not stall the other
// path into the same leaf.
TEST(AutogradTest, ZeroGradientPathDoesNotBlockOtherPaths) {
  const Tensor x = Leaf({1, -2, 3}, {3});
  sum(sign(x * 2.0) * x).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(Read(x.grad()), (Values{1, -1, 1}));
  EXPECT_TRUE(
      GradCheck([](const auto& in) { return sign(in[0] * 2.0) * in[0]; }, {x}));
}

TEST(AutogradTest, NoGradGuardRecordsNothing) {
  const Tensor x = Leaf({1, 2}, {2});
  EXPECT_TRUE(GradMode::is_enabled());
  {
    NoGradGuard guard;
    EXPECT_FALSE(GradMode::is_enabled());
    const Tensor y = exp(x) * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_TRUE(y.is_leaf());
    EXPECT_FALSE(x.reshape({2, 1}).requires_grad());
    { NoGradGuard nested; }
    EXPECT_FALSE(GradMode::is_enabled());  // restores the outer state
  }
  EXPECT_TRUE(GradMode::is_enabled());
  const Tensor z = exp(x);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_NE(z.grad_fn(), nullptr);
  EXPECT_FALSE(z.is_leaf());
  // Results without a floating dtype never require grad.
  EXPECT_FALSE(argmax(x, 0).requires_grad());
  EXPECT_FALSE(gt(x, x).requires_grad());
  // detach() cuts the graph.
  sum(x.detach() * x).backward();
  EXPECT_EQ(Read(x.grad()), (Values{1, 2}));
}

TEST(AutogradTest, ModifyingASavedTensorThenBackwardThrows) {
  const Tensor x = Leaf({1, 2, 3}, {3});
  Tensor w = F64({4, 5, 6}, {3});  // saved by mul for x's gradient
  const Tensor loss = sum(x * w);
  w.add_(ones({3}, {.dtype = DType::kF64}));
  ExpectError([&] { loss.backward(); }, {"in-place", "mul"});
  // A saved output (exp saves its result) modified under no_grad.
  Tensor y = exp(x);
  {
    NoGradGuard guard;
    y.mul_(2.0);
  }
  ExpectError(
      [&] {
        y.backward(F64({1, 1, 1}, {3}));
      },
      {"in-place", "exp", "output"});
}

TEST(AutogradTest, InPlaceOnATensorThatRequiresGradThrowsInGradMode) {
  Tensor x = Leaf({1, 2, 3}, {3});
  ExpectError([&] { x.add_(ones({3}, {.dtype = DType::kF64})); },
              {"add_", "in place"});
  ExpectError([&] { x.mul_(2.0); }, {"mul_", "in place"});
  ExpectError([&] { x.zero_(); }, {"fill_", "in place"});
  Tensor y = x * 2.0;  // a non-leaf that requires grad
  ExpectError([&] { y.add_(y); }, {"add_"});
  EXPECT_EQ(Read(x), (Values{1, 2, 3}));  // nothing was written
  {
    NoGradGuard guard;  // as optimizers do
    x.add_(ones({3}, {.dtype = DType::kF64}), -0.5);
  }
  EXPECT_EQ(Read(x), (Values{0.5, 1.5, 2.5}));
  EXPECT_TRUE(x.requires_grad());
}

TEST(AutogradTest, SetGradAndZeroGrad) {
  const Tensor x = Leaf({1, 2}, {2});
  EXPECT_FALSE(x.grad().defined());
  x.set_grad(F64({10, 20}, {2}));
  sum(x * x).backward();
  EXPECT_EQ(Read(x.grad()),
            (Values{12, 24}));  // accumulates into the given grad
  Tensor g = x.grad();
  g.zero_();
  EXPECT_EQ(Read(x.grad()),
            (Values{0, 0}));  // .grad is that tensor, not a copy
  sum(x * 3.0).backward();
  EXPECT_EQ(Read(x.grad()), (Values{3, 3}));
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
  sum(x).backward();
  EXPECT_EQ(Read(x.grad()), (Values{1, 1}));
  ExpectError(
      [&] {
        x.set_grad(F64({1, 2, 3}, {3}));
      },
      {"set_grad", "[3]", "[2]"});
  ExpectError([&] { x.set_grad(ones({2})); }, {"set_grad", "f32", "f64"});
}

TEST(AutogradTest, LeafGradsAreNotAliased) {
  const Tensor x = Leaf({1, 2, 3}, {3}), y = Leaf({4, 5, 6}, {3});
  const Tensor w = F64({1, 10, 100}, {3});
  sum((x + y) * w).backward();  // add hands the same gradient tensor to both
  EXPECT_EQ(Read(x.grad()), (Values{1, 10, 100}));
  EXPECT_EQ(Read(y.grad()), (Values{1, 10, 100}));
  EXPECT_NE(x.grad().storage(), y.grad().storage());
  Tensor gx = x.grad();
  gx.add_(ones({3}, {.dtype = DType::kF64}));
  EXPECT_EQ(Read(y.grad()), (Values{1, 10, 100}));
  // Through a view of the shared gradient.
  const Tensor a = Leaf({1, 2, 3, 4}, {2, 2}), b = Leaf({5, 6, 7, 8}, {4});
  sum((a.reshape({4}) + b) * F64({1, 2, 3, 4}, {4})).backward();
  EXPECT_NE(a.grad().storage(), b.grad().storage());
  Tensor ga = a.grad();
  ga.mul_(0.0);
  EXPECT_EQ(Read(b.grad()), (Values{1, 2, 3, 4}));
  // A leaf as the root: its grad is not the caller's gradient tensor.
  const Tensor r = Leaf({1, 2}, {2});
  const Tensor seed = F64({3, 4}, {2});
  r.backward(seed);
  Tensor gr = r.grad();
  gr.add_(seed);
  EXPECT_EQ(Read(seed), (Values{3, 4}));
}

TEST(AutogradTest, BackwardArguments) {
  const Tensor x = Leaf({1, 2, 3}, {3});
  const Tensor y = x * x;
  ExpectError([&] { y.backward(); }, {"backward", "scalar", "[3]"});
  y.backward(F64({1, 0, -1}, {3}));
  EXPECT_EQ(Read(x.grad()), (Values{2, 0, -6}));
  ExpectError(
      [&] {
        y.backward(F64({1, 2}, {2}));
      },
      {"backward", "[2]", "[3]"});
  const Tensor c = F64({1}, {});
  ExpectError([&] { c.backward(); }, {"backward", "does not require grad"});
}

// Every kDiff op of the table has a gradient check above.
TEST(GradCoverageTest, EveryDifferentiableOpIsChecked) {
  const std::vector<std::string> checked = {
      "neg", "abs", "sign", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh",
      "erf", "sigmoid", "relu", "gelu", "gelu_tanh", "sin", "cos", "cast",
      "add", "sub", "mul", "div", "pow", "maximum", "minimum", "where", "sum",
      "mean", "amax", "var", "softmax", "log_softmax", "layer_norm",
      "cross_entropy", "mse_loss", "matmul", "reshape", "permute", "slice",
      "expand", "squeeze", "unsqueeze", "contiguous", "embedding",
      "slice_backward", "dropout", "silu", "cat", "topk",
      // ConvolutionGradTest
      "conv2d", "max_pool2d", "avg_pool2d"};
  std::vector<std::string> diff;
#define OP(e, text, lo, hi, kind, amp, flags) \
  if ((flags)&ir::kDiff) diff.push_back(text);
  using ir::kCommutative;
  using ir::kDiff;
  using ir::kFloatResult;
  using ir::kFusedReduction;
  using ir::kGemmActivation;
  using ir::kInplace;
  using ir::kNoFlags;
  using ir::kOrderedView;
  using ir::kPure;
  using ir::kRowReduction;
#include "ir/ops.def"
  std::vector<std::string> want = checked;
  std::sort(want.begin(), want.end());
  std::sort(diff.begin(), diff.end());
  EXPECT_EQ(diff, want);
}

}  // namespace
}  // namespace stepjit
