// A compiled step never replays a stale graph: training flags, rebound captured
// tensors, host numbers baked in as constants, and bounded retracing (issue:
// silent failures).
//
// Every test runs the same step eagerly as the reference, on twin models that
// start identical, and expects the compiled results to equal it exactly
// (compiled f32 CPU steps are bit-identical to eager).
#include <sstream>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/util/train_step.h"

namespace stepjit {
namespace {

std::vector<float> Values(const Tensor& t) {
  return t.contiguous().to(DType::kF32).to_vector<float>();
}

nn::Sequential DropoutModel() {
  manual_seed(11);
  return nn::Sequential(nn::Linear(6, 16), nn::ReLU(), nn::Dropout(0.5),
                        nn::Linear(16, 3));
}

struct DropoutTwin {
  nn::Sequential model = DropoutModel();
  optim::SGD opt{model.parameters(),
                 optim::SGDOptions{.lr = 0.05, .momentum = 0.9}};
  // In eval mode (dropout off) when `eval`.
  explicit DropoutTwin(bool eval = false) {
    if (eval) model.eval();
  }
  Tensor Step(const Tensor& x, const Tensor& y) {
    return test::CrossEntropyStep(model, opt)(x, y);
  }
};

TEST(NeverStaleTest,
     EvalAfterTrainSelectsAnotherSpecializationAndTrainReplaysAgain) {
  DropoutTwin a, b;
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return a.Step(x, y); });
  Generator data(3);
  Tensor x = randn({8, 6}, {}, &data);
  Tensor y = randint(0, 3, {8}, {.dtype = DType::kI64}, &data);
  // Both twins draw dropout masks from the default generator: reseed it
  // before each so they see the same stream.
  auto both = [&](const char* phase, int i) {
    manual_seed(100 + i);
    const std::vector<float> got = Values(fast(x, y));
    manual_seed(100 + i);
    const std::vector<float> want = Values(b.Step(x, y));
    EXPECT_EQ(got, want) << phase << " call " << i;
  };
  for (int i = 0; i < 4; ++i) both("train", i);
  a.model.eval();
  b.model.eval();
  for (int i = 4; i < 8; ++i) both("eval", i);
  a.model.train();
  b.model.train();
  for (int i = 8; i < 12; ++i) both("train again", i);
  a.model.eval();
  b.model.eval();
  for (int i = 12; i < 14; ++i) both("eval again", i);
  for (size_t i = 0; i < a.model.parameters().size(); ++i) {
    EXPECT_EQ(Values(a.model.parameters()[i]), Values(b.model.parameters()[i]))
        << "param " << i;
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 2) << fast.explain();  // one per mode, each kept
  EXPECT_EQ(s.specializations, 2);
  EXPECT_NE(
      fast.explain().find("module training flag is off now, traced with it on"),
      std::string::npos)
      << fast.explain();
}

TEST(NeverStaleTest, ReboundCapturedTensorRetraces) {
  Tensor scale = full({4}, 1.0);
  auto step = [&](const Tensor& x) { return sum(x * scale); };
  auto fast = compile(step, {.warmup_steps = 0});
  const Tensor x = arange(1, 5, 1);  // 1 2 3 4
  for (int i = 0; i < 6; ++i) {
    if (i == 4) scale = full({4}, 2.0);  // a new tensor, not an in-place update
    EXPECT_EQ(fast(x).item(), step(x).item()) << "call " << i;
  }
  EXPECT_EQ(fast(x).item(), 20.0);
  const std::string why = fast.explain();
  EXPECT_NE(why.find("tensor(s) captured from outside that no guard can see "
                     "rebound (s0 f32[4])"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("a tensor the step captures was rebound"),
            std::string::npos)
      << why;
  EXPECT_EQ(fast.stats().traces, 2);
  // Unguarded state is re-traced on every replay, not only periodically.
  EXPECT_EQ(fast.stats().verifications, fast.stats().replays);
}

TEST(NeverStaleTest, InPlaceUpdateOfACapturedTensorNeedsNoRetrace) {
  Tensor scale = full({4}, 1.0);
  auto fast = compile([&](const Tensor& x) { return sum(x * scale); },
                      {.warmup_steps = 0});
  const Tensor x = arange(1, 5, 1);
  fast(x);
  fast(x);
  scale.fill_(3.0);
  EXPECT_EQ(fast(x).item(), 30.0);
  EXPECT_EQ(fast.stats().traces, 1);
}

TEST(NeverStaleTest, ChangedHostDoubleIsFoundNamedAndRetraced) {
  double alpha = 0.5;
  auto step = [&](const Tensor& x) { return sum(x * alpha); };
  auto fast = compile(step, {.warmup_steps = 0, .verify = Verify::kAlways});
  const Tensor x = arange(1, 5, 1);
  for (int i = 0; i < 5; ++i) {
    alpha = 0.5 + i;
    EXPECT_EQ(fast(x).item(), step(x).item()) << "call " << i;
  }
  // Found on the first change, named, and lifted into an argument of the
  // compiled step: the later changes need nothing.
  const std::string why = fast.explain();
  EXPECT_NE(why.find("takes host numbers that changed as arguments (rebuilt "
                     "once): op #0 (full -> f32[]) 0.5 -> 1.5"),
            std::string::npos)
      << why;
  EXPECT_EQ(fast.stats().verify_mismatches, 1);
  EXPECT_EQ(fast.stats().traces, 2);
}

TEST(NeverStaleTest, DefaultVerificationCatchesAChangeOnTheFirstReplays) {
  double alpha = 0.5;
  auto step = [&](const Tensor& x) { return sum(x * alpha); };
  auto fast = compile(step, {.warmup_steps = 0});
  const Tensor x = arange(1, 5, 1);
  fast(x);      // traced
  alpha = 2.0;  // before the first replay: the periodic check runs there
  EXPECT_EQ(fast(x).item(), 20.0);
  EXPECT_EQ(fast.stats().verify_mismatches, 1);
}

TEST(NeverStaleTest, VerifyOffKeepsTheTracedConstantAndSaysSo) {
  double alpha = 0.5;
  auto fast = compile([&](const Tensor& x) { return sum(x * alpha); },
                      {.warmup_steps = 0, .verify = Verify::kOffUnsafe});
  const Tensor x = arange(1, 5, 1);
  fast(x);
  alpha = 2.0;
  EXPECT_EQ(fast(x).item(),
            5.0);  // documented: nothing re-traces with verify off
  EXPECT_NE(fast.explain().find("verification: UNSAFE: off"), std::string::npos)
      << fast.explain();
}

TEST(NeverStaleTest, SetLrInsideTheStepFollowsTheScheduleWhenVerifiedAlways) {
  DropoutTwin a(/*eval=*/true), b(/*eval=*/true);
  int calls_a = 0, calls_b = 0;
  auto schedule = [](int i) { return 0.1 / (1 + i); };
  auto fast = compile(
      [&](const Tensor& x, const Tensor& y) {
        a.opt.set_lr(schedule(calls_a++));
        return a.Step(x, y);
      },
      {.verify = Verify::kAlways});
  Generator data(4);
  for (int i = 0; i < 8; ++i) {
    Tensor x = randn({5, 6}, {}, &data);
    Tensor y = randint(0, 3, {5}, {.dtype = DType::kI64}, &data);
    const std::vector<float> got = Values(fast(x, y));
    b.opt.set_lr(schedule(calls_b++));
    EXPECT_EQ(got, Values(b.Step(x, y))) << "step " << i;
  }
  for (size_t i = 0; i < a.model.parameters().size(); ++i) {
    EXPECT_EQ(Values(a.model.parameters()[i]), Values(b.model.parameters()[i]))
        << "param " << i;
  }
  EXPECT_NE(fast.explain().find("fill_"), std::string::npos) << fast.explain();
}

TEST(NeverStaleTest, ReplacingAParameterEveryCallStopsRetracingAtTheLimit) {
  DropoutTwin a(/*eval=*/true), b(/*eval=*/true);
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return a.Step(x, y); });
  auto [x, y] = test::RandomBatches(1, /*seed=*/5, /*rows=*/4,
                                    /*features=*/6, /*classes=*/3)[0];
  std::shared_ptr<nn::LinearImpl> fa = a.model.at<nn::LinearImpl>(0);
  std::shared_ptr<nn::LinearImpl> fb = b.model.at<nn::LinearImpl>(0);
  size_t explain_size_at_150 = 0;
  for (int i = 0; i < 300; ++i) {
    // Both twins get the same fresh bias (the optimizers keep the old one).
    Tensor bias = full({16}, 0.01 * (i % 7));
    fa->replace_parameter("bias", bias.clone());
    fb->replace_parameter("bias", bias.clone());
    EXPECT_EQ(Values(fast(x, y)), Values(b.Step(x, y))) << "call " << i;
    if (i == 150) explain_size_at_150 = fast.explain().size();
  }
  const CompileStats s = fast.stats();
  // Each replacement replaces the specialization: max_traces (8) bounds
  // the specializations, twice that the traces.
  EXPECT_EQ(s.traces, 16);
  EXPECT_EQ(s.specializations, 1);
  EXPECT_GT(s.fallbacks, 260);
  const std::string why = fast.explain();
  EXPECT_NE(why.find("16 traces already made (2 x max_traces"),
            std::string::npos)
      << why;
  // Bounded: counts per cause and the last few events, not one line per call.
  EXPECT_LE(why.size(), explain_size_at_150 + 32) << why;
}

TEST(NeverStaleTest, ReplacingAParameterOnceRetracesOnce) {
  DropoutTwin a(/*eval=*/true), b(/*eval=*/true);
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return a.Step(x, y); });
  auto [x, y] = test::RandomBatches(1, /*seed=*/6, /*rows=*/4,
                                    /*features=*/6, /*classes=*/3)[0];
  for (int i = 0; i < 12; ++i) {
    if (i == 5) {
      Tensor w = full({3, 16}, 0.02);
      a.model.at<nn::LinearImpl>(3)->replace_parameter("weight", w.clone());
      b.model.at<nn::LinearImpl>(3)->replace_parameter("weight", w.clone());
    }
    EXPECT_EQ(Values(fast(x, y)), Values(b.Step(x, y))) << "call " << i;
  }
  EXPECT_EQ(fast.stats().traces, 2) << fast.explain();
}

// Traced with one tensor passed twice, the graph reads both uses from the
// first argument; called with two different tensors it must not replay that.
TEST(NeverStaleTest, ArgumentsAliasedDifferentlyFromTheTraceRetrace) {
  auto step = [](const Tensor& a, const Tensor& b) { return sum(a * 2.0 + b); };
  auto fast = compile(step, {.warmup_steps = 0});
  const Tensor x = arange(0, 4, 1, {.dtype = DType::kF32});
  const Tensor y = full({4}, 10.0);
  fast(x, x);
  fast(x, x);
  EXPECT_EQ(fast(x, y).item(), step(x, y).item());
  EXPECT_EQ(fast(x, x).item(), step(x, x).item());
  EXPECT_NE(
      fast.explain().find(
          "argument x1 is its own tensor, traced as the same storage as x0"),
      std::string::npos)
      << fast.explain();
}

// A step that keeps a tensor it made (here in a captured history) keeps a
// shape-only one from the recording call too: the compiler makes it real
// with the value the step gave it. What it keeps is what it returns, so the
// compiled step still replays, on every call.
TEST(NeverStaleTest, StepKeepingWhatItReturnsStillReplaysAndKeepsRealValues) {
  std::vector<Tensor> history;
  double k = 3.0;
  auto step = [&](const Tensor& x) {
    Tensor y = sum(x * k);
    history.push_back(y);
    return y;
  };
  auto fast = compile(step, {.warmup_steps = 0});
  const Tensor x = arange(1, 5, 1, {.dtype = DType::kF32});
  for (int i = 0; i < 150; ++i) {
    if (i == 120) k = 4.0;  // after any sampled check would have stopped
    EXPECT_EQ(fast(x).item(), 10.0 * k) << "call " << i;
  }
  ASSERT_EQ(history.size(), 150u);
  for (size_t i = 0; i < history.size(); ++i)
    EXPECT_EQ(history[i].item(), i < 120 ? 30.0 : 40.0) << "entry " << i;
  const CompileStats s = fast.stats();
  // Call 0 traces; call 120 finds k changed, runs its recording op by op
  // and compiles it; every other call replays.
  EXPECT_EQ(s.replays, 148) << fast.explain();
  EXPECT_EQ(s.verifications, 149);
  EXPECT_EQ(s.verify_mismatches, 1);
  EXPECT_EQ(s.kept_calls, 149);
}

// A step that keeps an intermediate it does not return (a memo of its
// activations): the recording call runs op by op to give it its value, and
// the compiled step replays on the calls that keep nothing.
TEST(NeverStaleTest, StepKeepingAnIntermediateGetsItsRealValue) {
  Tensor memo;
  int calls = 0;
  auto step = [&](const Tensor& x) {
    Tensor h = x * 2.0 + 1.0;
    if (calls++ % 10 == 0) memo = h;
    return sum(h * h);
  };
  auto fast = compile(step, {.warmup_steps = 0});
  Generator data(8);
  for (int i = 0; i < 40; ++i) {
    const Tensor x = randn({5}, {}, &data);
    const double want = sum((x * 2.0 + 1.0) * (x * 2.0 + 1.0)).item();
    EXPECT_NEAR(fast(x).item(), want, 1e-5 * std::abs(want)) << "call " << i;
    if (i % 10 == 0) {
      EXPECT_EQ(Values(memo), Values(x * 2.0 + 1.0)) << "call " << i;
    }
  }
  EXPECT_EQ(fast.stats().kept_calls, 3) << fast.explain();
  EXPECT_GE(fast.stats().replays, 30) << fast.explain();
}

TEST(NeverStaleTest, BadTraceAndVerifyOptionsAreRefused) {
  auto expect_refused = [](CompileOptions options, const std::string& message) {
    try {
      compile([](const Tensor& x) { return x * 2.0; }, options);
      ADD_FAILURE() << "expected: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << e.what();
    }
  };
  expect_refused({.max_traces = 0}, "compile: max_traces must be >= 1, got 0");
  expect_refused({.verify_first = -1},
                 "compile: verify_first must be >= 0, got -1");
  expect_refused(
      {.verify_every = -2},
      "compile: verify_every must be >= 0 (0: never periodically), got -2");
}

}  // namespace
}  // namespace stepjit
