// rms_norm and nn::RMSNorm against a float64 loop (forward), central finite
// differences in float64 (gradients of input and weight), PyTorch's
// semantics (f32 compute for 16-bit inputs, the default eps, dtype of the
// result), and their errors.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "tests/util/expect_error.h"
#include "training/nn/functional.h"
#include "training/nn/layers.h"

namespace stepjit {
namespace {

std::vector<double> Doubles(const Tensor& t) {
  return t.contiguous().to(DType::kF64).to_vector<double>();
}

// y[r, j] = x[r, j] / sqrt(mean_j x[r, j]^2 + eps) * w[j], rows of `n`.
std::vector<double> Reference(const std::vector<double>& x,
                              const std::vector<double>& w, int64_t n,
                              double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r * n < x.size(); ++r) {
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += x[r * n + j] * x[r * n + j];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t j = 0; j < n; ++j)
      y[r * n + j] = x[r * n + j] * inv * (w.empty() ? 1.0 : w[j]);
  }
  return y;
}

TEST(RmsNormTest, ForwardMatchesAFloat64Loop) {
  Generator gen(3);
  struct Case {
    std::vector<int64_t> shape, normalized;
  };
  for (const Case& c : {Case{{3, 7}, {7}}, Case{{2, 3, 5}, {3, 5}},
                        Case{{1, 1}, {1}}, Case{{4, 33}, {33}}}) {
    const Tensor x = randn(c.shape, {}, &gen);
    const Tensor w = randn(c.normalized, {}, &gen);
    int64_t n = 1;
    for (int64_t d : c.normalized) n *= d;
    const std::string what = ir::ShapeToString(c.shape);
    const double eps = std::numeric_limits<float>::epsilon();
    const std::vector<double> want = Reference(Doubles(x), Doubles(w), n, eps);
    const std::vector<double> got = Doubles(rms_norm(x, c.normalized, w));
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 2e-6 * std::abs(want[i]) + 1e-7)
          << what << " element " << i;
    // No weight, an explicit eps.
    const std::vector<double> plain =
        Doubles(rms_norm(x, c.normalized, {}, 0.5));
    const std::vector<double> plain_want = Reference(Doubles(x), {}, n, 0.5);
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_NEAR(plain[i], plain_want[i],
                  2e-6 * std::abs(plain_want[i]) + 1e-7)
          << what << " without weight, element " << i;
  }
}

// f16/bf16 inputs are normalized in f32 and rounded once to their dtype (as
// PyTorch's rms_norm); f64 is computed in f64 with f64's epsilon.
TEST(RmsNormTest, SixteenBitInputsComputeInF32AndF64InF64) {
  Generator gen(4);
  const Tensor x = randn({5, 16}, {}, &gen);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const Tensor low = x.to(dt);
    const Tensor y = rms_norm(low, {16});
    EXPECT_EQ(y.dtype(), dt);
    // The reference from the rounded input, in f32, rounded to dt.
    const Tensor want = rms_norm(low.to(DType::kF32), {16}, {},
                                 std::numeric_limits<float>::epsilon())
                            .to(dt);
    EXPECT_EQ(Doubles(y), Doubles(want)) << ir::DTypeName(dt);
    // A weight in f32 promotes the result to f32, as in PyTorch.
    EXPECT_EQ(rms_norm(low, {16}, ones({16})).dtype(), DType::kF32);
  }
  const Tensor x64 = x.to(DType::kF64);
  const std::vector<double> got = Doubles(rms_norm(x64, {16}));
  const std::vector<double> want =
      Reference(Doubles(x64), {}, 16, std::numeric_limits<double>::epsilon());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-14 * std::abs(want[i]))
        << "f64 element " << i;
}

// d/dx and d/dw of L = sum(rms_norm(x, w) * r), against central differences
// of the float64 reference.
TEST(RmsNormTest, GradientsMatchFiniteDifferences) {
  Generator gen(5);
  const int64_t rows = 3, n = 6;
  const Tensor x0 = randn({rows, n}, {.dtype = DType::kF64}, &gen);
  const Tensor w0 = randn({n}, {.dtype = DType::kF64}, &gen);
  const Tensor r = randn({rows, n}, {.dtype = DType::kF64}, &gen);
  const double eps = 1e-3;
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor w = w0.clone().set_requires_grad(true);
  sum(rms_norm(x, {n}, w, eps) * r).backward();
  const std::vector<double> xs = Doubles(x0), ws = Doubles(w0), rs = Doubles(r);
  auto loss = [&](const std::vector<double>& xv,
                  const std::vector<double>& wv) {
    const std::vector<double> y = Reference(xv, wv, n, eps);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * rs[i];
    return l;
  };
  const double h = 1e-6;
  const std::vector<double> gx = Doubles(x.grad()), gw = Doubles(w.grad());
  // Each element of `at` moved by +-h, through `f`, against `grad`.
  auto check = [&](const std::vector<double>& at,
                   const std::vector<double>& grad, const auto& f,
                   const char* what) {
    for (size_t i = 0; i < at.size(); ++i) {
      std::vector<double> up = at, down = at;
      up[i] += h;
      down[i] -= h;
      const double fd = (f(up) - f(down)) / (2 * h);
      EXPECT_NEAR(grad[i], fd, 1e-6 * std::abs(fd) + 1e-7) << what << " " << i;
    }
  };
  check(
      xs, gx, [&](const std::vector<double>& v) { return loss(v, ws); },
      "d/dx");
  check(
      ws, gw, [&](const std::vector<double>& v) { return loss(xs, v); },
      "d/dw");
}

TEST(RmsNormTest, ModuleHasPyTorchsParameterAndDefaults) {
  nn::RMSNorm norm(8);
  EXPECT_EQ(norm->named_parameters().size(), 1u);
  EXPECT_EQ(norm->named_parameters()[0].first, "weight");
  EXPECT_EQ(Doubles(norm->weight), std::vector<double>(8, 1.0));
  Generator gen(6);
  const Tensor x = randn({2, 8}, {}, &gen);
  EXPECT_EQ(Doubles(norm(x)),
            Doubles(nn::functional::rms_norm(x, {8}, norm->weight)));
  EXPECT_TRUE(nn::RMSNorm(std::vector<int64_t>{2, 4}, 1e-6, false)
                  ->parameters()
                  .empty());
  // A trained weight scales the result per column.
  {
    NoGradGuard no_grad;
    norm->weight.mul_(2.0);
  }
  const std::vector<double> twice = Doubles(norm(x)),
                            once = Doubles(rms_norm(x, {8}));
  for (size_t i = 0; i < twice.size(); ++i)
    EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
}

TEST(RmsNormTest, BadArgumentsAreRefusedWithWhatWasExpected) {
  const Tensor x = ones({2, 3});
  test::ExpectError([&] { rms_norm(x, {4}); },
                    {"rms_norm: normalized_shape [4] must match the trailing "
                     "dims of input [2, 3]"});
  test::ExpectError([&] { rms_norm(x.to(DType::kI64), {3}); },
                    {"rms_norm: expected a floating-point input, got i64"});
  test::ExpectError(
      [&] { rms_norm(x, {3}, ones({2})); },
      {"rms_norm: weight of shape [2], expected normalized_shape [3]"});
  test::ExpectError([&] { rms_norm(x, {3}, {}, -1.0); },
                    {"rms_norm: eps must not be negative, got -1"});
  test::ExpectError([&] { nn::RMSNorm(std::vector<int64_t>{}); },
                    {"RMSNorm: normalized_shape must not be empty"});
  test::ExpectError([&] { nn::RMSNorm(4, -1e-3); },
                    {"RMSNorm: eps must not be negative"});
}

}  // namespace
}  // namespace stepjit
