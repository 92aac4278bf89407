// The accuracy checker: compiled vs eager from the same state, a miscompiled
// region caught and named, a graph-level divergence told apart, and the eager
// results kept.
#include <sstream>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "testing/miscompile_region.h"
#include "tests/util/expect_error.h"
#include "tests/util/train_step.h"

namespace stepjit {
namespace {

std::vector<float> Values(const Tensor& t) {
  return t.contiguous().to(DType::kF32).to_vector<float>();
}

struct Twin {
  nn::Sequential model = [] {
    manual_seed(21);
    return nn::Sequential(nn::Linear(6, 16), nn::ReLU(), nn::Linear(16, 3));
  }();
  optim::AdamW opt{model.parameters(), optim::AdamWOptions{.lr = 1e-2}};
  Tensor Step(const Tensor& x, const Tensor& y) {
    return test::CrossEntropyStep(model, opt)(x, y);
  }
};

struct Data {
  std::vector<Tensor> x, y;
  explicit Data(int n) {
    Generator g(9);
    for (int i = 0; i < n; ++i) {
      x.push_back(randn({7, 6}, {}, &g));
      y.push_back(randint(0, 3, {7}, {.dtype = DType::kI64}, &g));
    }
  }
};

void ExpectSameParameters(Twin& a, Twin& b) {
  for (size_t i = 0; i < a.model.parameters().size(); ++i) {
    EXPECT_EQ(Values(a.model.parameters()[i]), Values(b.model.parameters()[i]))
        << "param " << i;
  }
}

// Each batch of `d` through `fast` and through `eager`'s step: the same loss.
template <typename Fast>
void ExpectSameLosses(Fast& fast, Twin& eager, const Data& d) {
  for (size_t i = 0; i < d.x.size(); ++i) {
    EXPECT_EQ(Values(fast(d.x[i], d.y[i])), Values(eager.Step(d.x[i], d.y[i])))
        << "step " << i;
  }
}

TEST(CheckerTest, CleanStepPassesAndStaysBitIdenticalToEager) {
  Twin a, b;
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return a.Step(x, y); },
              {.check = true, .check_replays = 3});
  ExpectSameLosses(fast, b, Data(8));
  ExpectSameParameters(a, b);
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.checks, 3);
  EXPECT_EQ(s.check_failures, 0);
  EXPECT_EQ(s.replays, 3);  // 1 warmup, 1 trace, 3 checked, then replays
  EXPECT_EQ(
      fast.check_report().rfind("stepjit check [train_step, call 5]: OK", 0),
      0u)
      << fast.check_report();
  EXPECT_NE(fast.explain().find("accuracy checks: 3 run, 0 diverged"),
            std::string::npos)
      << fast.explain();
}

TEST(CheckerTest, MiscompiledRegionIsCaughtAndNamedAndTheEagerResultIsKept) {
  Twin a, b;
  std::optional<runtime::ScopedMiscompileRegion> hook;
  // The first generated region with a `mul`: it computes `add` instead.
  hook.emplace("", ir::OpId::kMul, ir::OpId::kAdd);
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return a.Step(x, y); },
              {.check = true, .check_replays = 1});
  ExpectSameLosses(fast, b, Data(6));
  ASSERT_EQ(hook->miscompiled().size(), 1u);
  const std::string region = hook->miscompiled()[0];
  // The checked call kept the eager results, and later calls run eagerly.
  ExpectSameParameters(a, b);
  EXPECT_EQ(fast.stats().replays, 0);
  EXPECT_NE(fast.explain().find("eager-only (the accuracy checker found"),
            std::string::npos)
      << fast.explain();
  const std::string report = fast.check_report();
  EXPECT_EQ(report.rfind("stepjit check [train_step, call 3]: DIVERGED", 0), 0u)
      << report;
  EXPECT_NE(report.find("worst: "), std::string::npos) << report;
  EXPECT_NE(
      report.find(
          "guilty region (the first whose generated kernel disagrees with its "
          "body run op by op): " +
          region + " result"),
      std::string::npos)
      << report;
  EXPECT_NE(report.find("fusion @" + region), std::string::npos) << report;
  EXPECT_EQ(fast.stats().check_failures, 1);
  EXPECT_NE(fast.explain().find("accuracy checks: 1 run, 1 diverged"),
            std::string::npos);
}

TEST(CheckerTest, CheckNextChecksOnDemand) {
  Twin a;
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return a.Step(x, y); });
  Data d(6);
  for (int i = 0; i < 4; ++i) fast(d.x[i], d.y[i]);
  EXPECT_EQ(fast.stats().checks, 0);
  fast.check_next(2);
  for (int i = 4; i < 6; ++i) fast(d.x[i], d.y[i]);
  EXPECT_EQ(fast.stats().checks, 2);
  EXPECT_EQ(fast.stats().check_failures, 0) << fast.check_report();
}

// A step that writes a tensor behind dispatch's back (through data_ptr): no
// trace can see it, so the graph itself differs from the step. Every region
// agrees with its body; the report must say the graph is to blame.
TEST(CheckerTest, DivergenceOutsideGeneratedCodeBlamesTheGraph) {
  Tensor counter = zeros({1});
  Tensor w = full({4}, 0.5);
  auto step = [&](const Tensor& x) {
    counter.data<float>()[0] += 1.0f;  // invisible to the tracer
    return sum(x * w) + counter;
  };
  auto fast =
      compile(step, {.warmup_steps = 0, .check = true, .check_replays = 1});
  const Tensor x = arange(1, 5, 1, {.dtype = DType::kF32});
  fast(x);
  fast(x);
  const std::string report = fast.check_report();
  EXPECT_NE(report.find("DIVERGED"), std::string::npos) << report;
  EXPECT_NE(report.find("worst: "), std::string::npos) << report;
  EXPECT_NE(
      report.find("the graph itself computes differently from the eager step"),
      std::string::npos)
      << report;
  EXPECT_NE(
      report.find(
          "pass bisection: the traced graph (before any pass), run op by op, "
          "already disagrees"),
      std::string::npos)
      << report;
}

TEST(CheckerTest, BadCheckOptionsAreRefused) {
  auto make = [] {
    return compile([](const Tensor& x) { return x * 2.0; },
                   {.check = true, .check_replays = -1});
  };
  test::ExpectError(make, {"check_replays must be >= 0, got -1"});
}

// Mixed precision applied by the compiler: the eager reference runs in f32
// without a scaler, so the comparison uses f16's tolerance. SGD exposes a
// gradient consumer reading scaled or low-precision values (the update would
// be off by the loss scale), clipping a norm of scaled values.
TEST(CheckerTest, CompilerAppliedF16WithSgdAndClippingAgreesWithEager) {
  manual_seed(21);
  nn::Sequential model(nn::Linear(6, 16), nn::ReLU(), nn::Linear(16, 3));
  optim::SGD opt(model.parameters(),
                 optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  auto fast = compile(
      [&](const Tensor& x, const Tensor& y) {
        opt.zero_grad();
        Tensor loss = cross_entropy(model(x), y);
        loss.backward();
        nn::utils::clip_grad_norm_(model.parameters(), 0.5);
        opt.step();
        return loss;
      },
      {.check = true, .check_replays = 3, .amp = DType::kF16});
  Data d(6);
  for (int i = 0; i < 6; ++i) fast(d.x[i], d.y[i]);
  EXPECT_EQ(fast.stats().checks, 3);
  EXPECT_EQ(fast.stats().check_failures, 0) << fast.check_report();
}

// With compiler-applied loss scaling, a batch whose gradients overflow is
// skipped, while the eager step (which has no scaler) applies NaN updates: a
// legitimate divergence that no generated region explains. The pass
// bisection must pin it on the grad-scaler pass, not on autocast.
TEST(CheckerTest, PassBisectionNamesThePassAfterWhichTheGraphDisagrees) {
  manual_seed(21);
  nn::Sequential model(nn::Linear(6, 16), nn::ReLU(), nn::Linear(16, 3));
  optim::SGD opt(model.parameters(), optim::SGDOptions{.lr = 0.05});
  auto fast = compile(test::CrossEntropyStep(model, opt),
                      {.amp = DType::kBF16, .loss_scaling = true});
  Data d(5);
  for (int i = 0; i < 4; ++i) fast(d.x[i], d.y[i]);
  fast.check_next();
  fast(full({7, 6}, std::numeric_limits<double>::infinity()), d.y[4]);
  const std::string report = fast.check_report();
  EXPECT_NE(report.find("DIVERGED"), std::string::npos) << report;
  EXPECT_NE(report.find("every generated region agrees with its body"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("pass bisection: the graph after pass 2 `grad-scaler` "
                        "is the first to "
                        "disagree"),
            std::string::npos)
      << report;
}

TEST(CheckerTest, StepjitCheckEnvironmentTurnsTheCheckerOn) {
  struct Env {
    explicit Env(const char* v) { setenv("STEPJIT_CHECK", v, 1); }
    ~Env() { unsetenv("STEPJIT_CHECK"); }
  };
  {
    Env env("2");
    Twin a;
    auto fast = compile([&](const Tensor& x, const Tensor& y) { return a.Step(x, y); });
    Data d(6);
    for (int i = 0; i < 6; ++i) fast(d.x[i], d.y[i]);
    EXPECT_EQ(fast.stats().checks, 2);
    EXPECT_EQ(fast.stats().check_failures, 0) << fast.check_report();
  }
  Env env("yes");
  try {
    compile([](const Tensor& x) { return x * 2.0; });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("STEPJIT_CHECK: expected 0 (off), 1 (check the first 3 "
                                         "replays of each specialization) or N (the first N), "
                                         "got 'yes'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace stepjit
