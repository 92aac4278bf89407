// nn::BatchNorm2d against PyTorch's formulas written out in float64: the
// training output (batch statistics, biased variance), the running
// statistics over several steps (momentum, unbiased variance), the counter,
// eval mode, gradients by finite differences, buffers in state_dict() and
// load_state_dict(), and clear errors.
#include <cmath>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/util/expect_error.h"

namespace stepjit {
namespace {

std::vector<double> F64(const Tensor& t) {
  return t.contiguous().to(DType::kF64).to_vector<double>();
}

struct Stats {
  std::vector<double> mean, var_biased;
};

Stats ChannelStats(const std::vector<double>& x, int64_t n, int64_t c,
                   int64_t hw) {
  Stats s{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) sum += x[(i * c + ch) * hw + j];
    s.mean[ch] = sum / static_cast<double>(n * hw);
    double sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) {
        const double d = x[(i * c + ch) * hw + j] - s.mean[ch];
        sq += d * d;
      }
    s.var_biased[ch] = sq / static_cast<double>(n * hw);
  }
  return s;
}

TEST(BatchNormTest, TrainingAndRunningStatisticsFollowPyTorch) {
  const int64_t n = 3, c = 4, h = 2, w = 5, hw = h * w;
  const double momentum = 0.25, eps = 1e-3;
  nn::BatchNorm2d bn(c, nn::BatchNormOptions{.eps = eps, .momentum = momentum});
  // A non-trivial affine.
  {
    NoGradGuard no_grad;
    bn->weight.copy_(
        from_vector(std::vector<float>{0.5f, 1.5f, -1.0f, 2.0f}, {c}));
    bn->bias.copy_(
        from_vector(std::vector<float>{0.1f, -0.2f, 0.3f, 0.0f}, {c}));
  }
  std::vector<double> running_mean(c, 0.0), running_var(c, 1.0);
  Generator gen(3);
  for (int step = 0; step < 4; ++step) {
    const Tensor x = randn({n, c, h, w}, {}, &gen) * 2.0 + 0.5;
    const std::vector<double> xv = F64(x);
    const Stats s = ChannelStats(xv, n, c, hw);
    const std::vector<double> got = F64(bn(x));
    const std::vector<double> gamma{0.5, 1.5, -1.0, 2.0},
        beta{0.1, -0.2, 0.3, 0.0};
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t j = 0; j < hw; ++j) {
          const int64_t at = (i * c + ch) * hw + j;
          const double want = (xv[at] - s.mean[ch]) /
                                  std::sqrt(s.var_biased[ch] + eps) *
                                  gamma[ch] +
                              beta[ch];
          ASSERT_NEAR(got[at], want, 1e-5 * (1 + std::fabs(want))) << at;
        }
    const double m = static_cast<double>(n * hw);
    for (int64_t ch = 0; ch < c; ++ch) {
      running_mean[ch] =
          (1 - momentum) * running_mean[ch] + momentum * s.mean[ch];
      running_var[ch] = (1 - momentum) * running_var[ch] +
                        momentum * s.var_biased[ch] * m / (m - 1);
    }
    const std::vector<double> rm = F64(bn->running_mean),
                              rv = F64(bn->running_var);
    for (int64_t ch = 0; ch < c; ++ch) {
      EXPECT_NEAR(rm[ch], running_mean[ch], 1e-6) << "step " << step;
      EXPECT_NEAR(rv[ch], running_var[ch], 1e-6) << "step " << step;
    }
    EXPECT_EQ(bn->num_batches_tracked.to_vector<int64_t>()[0], step + 1);
  }
  // Eval: the running statistics, and nothing moves.
  bn->eval();
  const Tensor x = randn({2, c, h, w}, {}, &gen);
  const std::vector<double> xv = F64(x), got = F64(bn(x));
  const std::vector<double> gamma{0.5, 1.5, -1.0, 2.0},
      beta{0.1, -0.2, 0.3, 0.0};
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < hw; ++j) {
        const int64_t at = (i * c + ch) * hw + j;
        const double want = (xv[at] - running_mean[ch]) /
                                std::sqrt(running_var[ch] + eps) * gamma[ch] +
                            beta[ch];
        ASSERT_NEAR(got[at], want, 1e-5 * (1 + std::fabs(want))) << at;
      }
  EXPECT_EQ(bn->num_batches_tracked.to_vector<int64_t>()[0], 4);
  EXPECT_NEAR(F64(bn->running_mean)[0], running_mean[0], 1e-6);
}

TEST(BatchNormTest, GradientsMatchFiniteDifferences) {
  nn::BatchNorm2d bn(3);
  bn->to(DType::kF64);
  {
    NoGradGuard no_grad;
    bn->weight.copy_(from_vector(std::vector<double>{0.7, -1.2, 1.9}, {3}));
    bn->bias.copy_(from_vector(std::vector<double>{0.2, 0.0, -0.4}, {3}));
  }
  Generator gen(8);
  Tensor x = randn({2, 3, 2, 3}, {.dtype = DType::kF64}, &gen);
  x.set_requires_grad(true);
  const Tensor wts = randn({2, 3, 2, 3}, {.dtype = DType::kF64}, &gen);
  auto loss = [&] { return sum(bn(x) * wts); };
  loss().backward();
  const std::vector<double> gx = F64(x.grad()), gw = F64(bn->weight.grad()),
                            gb = F64(bn->bias.grad());
  auto numeric = [&](const Tensor& t, int64_t i) {
    NoGradGuard no_grad;
    double* p = t.data<double>();
    const double orig = p[i], eps = 1e-6;
    p[i] = orig + eps;
    const double plus = F64(loss())[0];
    p[i] = orig - eps;
    const double minus = F64(loss())[0];
    p[i] = orig;
    return (plus - minus) / (2 * eps);
  };
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_NEAR(gx[i], numeric(x, i), 1e-6) << "x " << i;
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(gw[i], numeric(bn->weight, i), 1e-6) << "weight " << i;
    EXPECT_NEAR(gb[i], numeric(bn->bias, i), 1e-6) << "bias " << i;
  }
}

TEST(BatchNormTest, BuffersAreInTheStateDictAndLoad) {
  nn::Sequential model(nn::Conv2d(2, 3, 3), nn::BatchNorm2d(3));
  std::vector<std::string> names;
  for (const auto& [name, t] : model->state_dict()) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                "1.running_var", "1.num_batches_tracked"}));
  // Buffers are not parameters.
  EXPECT_EQ(model->parameters().size(), 4u);
  EXPECT_EQ(model->buffers().size(), 3u);
  model(randn({2, 2, 5, 5}));
  nn::Sequential other(nn::Conv2d(2, 3, 3), nn::BatchNorm2d(3));
  ASSERT_TRUE(other->load_state_dict(model->state_dict()).ok());
  const auto a = model->at<nn::BatchNorm2dImpl>(1);
  const auto b = other->at<nn::BatchNorm2dImpl>(1);
  EXPECT_EQ(F64(a->running_mean), F64(b->running_mean));
  EXPECT_EQ(F64(a->running_var), F64(b->running_var));
  EXPECT_EQ(b->num_batches_tracked.to_vector<int64_t>()[0], 1);
  // A missing buffer is named.
  auto state = model->state_dict();
  state.pop_back();
  const absl::Status st = other->load_state_dict(state);
  EXPECT_NE(st.message().find("'1.num_batches_tracked'"), std::string::npos)
      << st;
}

TEST(BatchNormTest, BadInputsSayWhatWasExpected) {
  nn::BatchNorm2d bn(4);
  test::ExpectError(
      [&] {
        bn(randn({2, 3, 4, 4}));
      },
      {"BatchNorm2d", "[N, 4, H, W]", "[2, 3, 4, 4]"});
  test::ExpectError(
      [&] {
        bn(randn({1, 4, 1, 1}));
      },
      {"BatchNorm2d", "more than 1 value per channel"});
  test::ExpectError([] { nn::BatchNorm2d(0); },
                    {"BatchNorm2d", "num_features must be positive"});
}

}  // namespace
}  // namespace stepjit
