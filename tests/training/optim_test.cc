// Tests optim::SGD and optim::AdamW against float64 re-implementations of
// torch.optim's update rules, plus zero_grad, set_lr and option validation.
#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/status.h"
#include "runtime/tensor.h"
#include "training/optim/adamw.h"
#include "training/optim/sgd.h"

namespace stepjit::optim {

// gtest prints a parameter without PrintTo as its bytes, padding included:
// ctest's test names then changed from one discovery to the next.
void PrintTo(const SGDOptions& o, std::ostream* os) {
  *os << "lr=" << o.lr << " momentum=" << o.momentum
      << " dampening=" << o.dampening << " weight_decay=" << o.weight_decay
      << " nesterov=" << o.nesterov;
}
void PrintTo(const AdamWOptions& o, std::ostream* os) {
  *os << "lr=" << o.lr << " beta1=" << o.beta1 << " beta2=" << o.beta2
      << " eps=" << o.eps << " weight_decay=" << o.weight_decay;
}

namespace {

using ::testing::HasSubstr;

// Dyadic values, so f32 and f64 start from the same numbers.
const std::vector<double> kInit = {1.0, -2.0, 0.5, 3.0};
const std::vector<std::vector<double>> kGrads = {
    {0.25, -0.5, 1.5, -0.125},
    {-0.75, 0.5, 0.25, 2.0},
    {0.5, 0.5, -1.0, 0.0625},
};

Tensor F32(const std::vector<double>& v) {
  return from_vector(std::vector<float>(v.begin(), v.end()),
                     {static_cast<int64_t>(v.size())});
}

Tensor MakeParam() {
  Tensor p = F32(kInit);
  p.set_requires_grad(true);
  return p;
}

std::vector<double> Values(const Tensor& t) {
  const std::vector<float> v = t.to_vector<float>();
  return {v.begin(), v.end()};
}

// 1e-6 relative to the largest element: single elements may come out of a
// cancellation (0.9 * -0.525 + 0.5), whose f32 error scales with the operands.
void ExpectClose(const Tensor& got, const std::vector<double>& want,
                 const std::string& what) {
  const std::vector<double> g = Values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(g[i], want[i], 1e-6 * scale + 1e-12)
        << what << " element " << i;
  }
}

// torch.optim.SGD's single-tensor update in float64.
struct SgdReference {
  SGDOptions o;
  std::vector<double> p = kInit;
  std::vector<double> buf = {};  // empty until the first step

  void Step(const std::vector<double>& grad) {
    const bool first = buf.empty();
    if (first) buf.resize(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] + o.weight_decay * p[i];
      if (o.momentum != 0) {
        buf[i] = first ? g : o.momentum * buf[i] + (1 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * g;
    }
  }
};

// torch.optim.AdamW's single-tensor update in float64.
struct AdamWReference {
  AdamWOptions o;
  std::vector<double> p = kInit;
  std::vector<double> m = std::vector<double>(kInit.size());
  std::vector<double> v = std::vector<double>(kInit.size());
  int t = 0;

  void Step(const std::vector<double>& grad) {
    ++t;
    const double bc1 = 1 - std::pow(o.beta1, t);
    const double bc2 = 1 - std::pow(o.beta2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - o.lr * o.weight_decay;
      m[i] += (grad[i] - m[i]) * (1 - o.beta1);
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * grad[i] * grad[i];
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + o.eps;
      p[i] -= o.lr / bc1 * m[i] / denom;
    }
  }
};

class SgdUpdateTest : public ::testing::TestWithParam<SGDOptions> {};

TEST_P(SgdUpdateTest, MatchesFloat64ReferenceOverThreeSteps) {
  Tensor p = MakeParam();
  SGD opt({p}, GetParam());
  SgdReference ref{.o = GetParam()};
  for (const auto& g : kGrads) {
    p.set_grad(F32(g));
    opt.step();
    ref.Step(g);
    ExpectClose(p, ref.p, "param");
    if (GetParam().momentum != 0) {
      ExpectClose(opt.state(0).momentum_buffer, ref.buf, "momentum_buffer");
    }
  }
  EXPECT_EQ(opt.step_count().item(), 3.0);
  if (GetParam().momentum == 0) {
    EXPECT_FALSE(opt.state(0).momentum_buffer.defined());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sgd, SgdUpdateTest,
    ::testing::Values(
        SGDOptions{.lr = 0.1}, SGDOptions{.lr = 0.1, .momentum = 0.9},
        SGDOptions{.lr = 0.05, .momentum = 0.8, .dampening = 0.3},
        SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true},
        SGDOptions{.lr = 0.1, .weight_decay = 0.01},
        SGDOptions{
            .lr = 0.1, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true}),
    // Named by their options (the default name is the printed parameter).
    [](const ::testing::TestParamInfo<SGDOptions>& info) {
      const SGDOptions& o = info.param;
      return absl::StrCat(
          "case", info.index, o.momentum != 0 ? "_momentum" : "",
          o.dampening != 0 ? "_dampening" : "", o.nesterov ? "_nesterov" : "",
          o.weight_decay != 0 ? "_decay" : "");
    });

class AdamWUpdateTest : public ::testing::TestWithParam<AdamWOptions> {};

TEST_P(AdamWUpdateTest, MatchesFloat64ReferenceOverThreeSteps) {
  Tensor p = MakeParam();
  AdamW opt({p}, GetParam());
  EXPECT_FALSE(opt.state(0).exp_avg.defined());  // lazy
  AdamWReference ref{.o = GetParam()};
  for (const auto& g : kGrads) {
    p.set_grad(F32(g));
    opt.step();
    ref.Step(g);
    ExpectClose(p, ref.p, "param");
    ExpectClose(opt.state(0).exp_avg, ref.m, "exp_avg");
    ExpectClose(opt.state(0).exp_avg_sq, ref.v, "exp_avg_sq");
  }
}

INSTANTIATE_TEST_SUITE_P(
    AdamW, AdamWUpdateTest,
    ::testing::Values(AdamWOptions{},
                      AdamWOptions{.lr = 0.1, .weight_decay = 0.1},
                      AdamWOptions{.lr = 0.05,
                                   .beta1 = 0.5,
                                   .beta2 = 0.9,
                                   .eps = 1e-3,
                                   .weight_decay = 0.0}),
    [](const ::testing::TestParamInfo<AdamWOptions>& info) {
      return absl::StrCat("case", info.index);
    });

TEST(AdamWTest, SkipsParamsWithoutGrad) {
  Tensor a = MakeParam();
  Tensor b = MakeParam();
  AdamW opt({a, b}, {.lr = 0.1});
  a.set_grad(F32(kGrads[0]));
  opt.step();
  EXPECT_TRUE(opt.state(0).exp_avg.defined());
  EXPECT_FALSE(opt.state(1).exp_avg.defined());
  ExpectClose(b, kInit, "untouched param");
}

TEST(OptimizerTest, SetLrTakesEffectOnNextStepKeepingIdentity) {
  Tensor p = MakeParam();
  SGD opt({p}, {.lr = 0.25});
  const Tensor lr = opt.lr_tensor();
  EXPECT_EQ(lr.dim(), 0);
  p.set_grad(F32(kGrads[0]));
  opt.step();
  opt.set_lr(0.5);
  EXPECT_TRUE(opt.lr_tensor().is_same(lr));
  EXPECT_EQ(opt.lr(), 0.5);
  opt.step();
  std::vector<double> want = kInit;
  for (size_t i = 0; i < want.size(); ++i) want[i] -= 0.75 * kGrads[0][i];
  ExpectClose(p, want, "param");
}

TEST(OptimizerTest, ParametersShareIdentity) {
  Tensor p = MakeParam();
  AdamW opt({p});
  ASSERT_EQ(opt.parameters().size(), 1u);
  EXPECT_TRUE(opt.parameters()[0].is_same(p));
}

TEST(OptimizerTest, ZeroGradSetToNoneAndInPlace) {
  Tensor p = MakeParam();
  SGD opt({p}, {.lr = 0.1});
  p.set_grad(F32(kGrads[0]));
  const Tensor grad = p.grad();
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(p.grad().is_same(grad));
  ExpectClose(grad, {0, 0, 0, 0}, "zeroed grad");
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
  opt.step();  // no grads: nothing moves
  ExpectClose(p, kInit, "param");
}

// Expects constructing with `make` to throw an Error mentioning `needle`.
template <typename Make>
void ExpectOptionError(Make make, const std::string& needle) {
  try {
    make();
    ADD_FAILURE() << "expected Error mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

TEST(OptimizerTest, BadOptionsRaiseErrorNamingTheValue) {
  Tensor p = MakeParam();
  ExpectOptionError([&] { SGD({p}, {.lr = -0.5}); }, "-0.5");
  ExpectOptionError([&] { SGD({p}, {.lr = 0.1, .momentum = -0.25}); }, "-0.25");
  ExpectOptionError([&] { SGD({p}, {.lr = 0.1, .weight_decay = -0.125}); },
                    "-0.125");
  ExpectOptionError([&] { SGD({p}, {.lr = 0.1, .nesterov = true}); },
                    "nesterov");
  ExpectOptionError(
      [&] {
        SGD({p},
            {.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .nesterov = true});
      },
      "dampening 0.5");
  ExpectOptionError([&] { AdamW({p}, {.lr = -1e-3}); }, "-0.001");
  ExpectOptionError([&] { AdamW({p}, {.beta1 = 1.0}); }, "index 0: 1");
  ExpectOptionError([&] { AdamW({p}, {.beta2 = -0.5}); }, "index 1: -0.5");
  ExpectOptionError([&] { AdamW({p}, {.eps = -1.0}); }, "epsilon value: -1");
  ExpectOptionError([&] { AdamW({p}, {.weight_decay = -0.25}); }, "-0.25");
  ExpectOptionError([&] { AdamW({}, {}); }, "empty parameter list");
  ExpectOptionError([&] { AdamW({p, p}, {}); }, "more than once");
  SGD opt({p}, {.lr = 0.1});
  ExpectOptionError([&] { opt.set_lr(-2.0); }, "-2");
}

}  // namespace
}  // namespace stepjit::optim
