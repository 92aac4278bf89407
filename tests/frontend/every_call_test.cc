// Every call is checked: what a user changes late in a run (after the first
// few replays, where a sampled check stops looking) reaches the compiled step
// on the very next call. Host numbers, clipping thresholds, a host `if`,
// freezing and unfreezing layers, a GPT whose sequence length changes every
// call, and the accuracy checker with dropout.
//
// Each test trains a compiled model beside an eager twin that starts
// identical and compares every call's loss and the final parameters exactly
// (compiled f32 CPU steps are bit-identical to eager) unless a tolerance is
// stated.
#include <functional>
#include <memory>
#include <sstream>

#include "frontend/stepjit.h"
#include "frontend/verify.h"
#include "gtest/gtest.h"
#include "runtime/autograd/engine.h"
#include "tests/util/gpt_twins.h"

namespace stepjit {
namespace {

std::vector<float> Values(const Tensor& t) {
  return t.contiguous().to(DType::kF32).to_vector<float>();
}

enum class Opt { kSgd, kNesterov, kAdamW };

std::unique_ptr<optim::Optimizer> MakeOptimizer(Opt opt,
                                                std::vector<Tensor> params) {
  switch (opt) {
    case Opt::kSgd:
      return std::make_unique<optim::SGD>(params,
                                          optim::SGDOptions{.lr = 0.05});
    case Opt::kNesterov:
      return std::make_unique<optim::SGD>(
          params,
          optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
    case Opt::kAdamW:
      return std::make_unique<optim::AdamW>(params,
                                            optim::AdamWOptions{.lr = 1e-2});
  }
  return nullptr;
}

// A model, its optimizer and the host values a user changes between calls.
struct Trainee {
  explicit Trainee(Opt opt) {
    manual_seed(21);
    model = nn::Sequential(nn::Linear(6, 16), nn::ReLU(), nn::Linear(16, 16),
                           nn::Tanh(), nn::Linear(16, 3));
    optimizer = MakeOptimizer(opt, model.parameters());
  }
  nn::Sequential model{nullptr};
  std::unique_ptr<optim::Optimizer> optimizer;
  double loss_weight = 1.0;
  double max_norm = 0.0;  // 0: no clipping
  int every = 0;          // >0: an extra term on every `every`-th call
  int calls = 0;

  // Freezes (no gradients) or unfreezes the model's `layer`-th module, a
  // Linear.
  void SetFrozen(int layer, bool frozen) {
    for (Tensor p : model->at<nn::LinearImpl>(layer)->parameters())
      p.set_requires_grad(!frozen);
  }

  Tensor Step(const Tensor& x, const Tensor& y) {
    optimizer->zero_grad();
    Tensor loss = cross_entropy(model(x), y) * loss_weight;
    if (every > 0 && calls % every == 0)
      loss = loss + 0.1 * mean(model(x) * model(x));
    ++calls;
    loss.backward();
    if (max_norm > 0) nn::utils::clip_grad_norm_(model.parameters(), max_norm);
    optimizer->step();
    return loss;
  }
};

struct TwinRun {
  Trainee compiled_twin, eager_twin;
  std::function<Tensor(const Tensor&, const Tensor&)> fast;
  CompileStats stats;
  std::string explain;

  TwinRun(Opt opt, CompileOptions options)
      : compiled_twin(opt), eager_twin(opt) {
    auto step =
        compile([this](const Tensor& x,
                       const Tensor& y) { return compiled_twin.Step(x, y); },
                options);
    fast = [step, this](const Tensor& x, const Tensor& y) mutable {
      Tensor loss = step(x, y);
      stats = step.stats();
      explain = step.explain();
      return loss;
    };
  }

  // Trains both for `calls` calls, calling `change(call, twin)` on each twin
  // before each call; returns the first call whose loss differs, or -1.
  int Train(int calls, const std::function<void(int, Trainee&)>& change) {
    Generator data(4);
    const Tensor x = randn({12, 6}, {}, &data);
    const Tensor y = randint(0, 3, {12}, {.dtype = DType::kI64}, &data);
    int first_diff = -1;
    for (int i = 0; i < calls; ++i) {
      change(i, compiled_twin);
      change(i, eager_twin);
      const std::vector<float> got = Values(fast(x, y));
      const std::vector<float> want = Values(eager_twin.Step(x, y));
      if (got != want && first_diff < 0) first_diff = i;
    }
    return first_diff;
  }

  void ExpectSameParameters() const {
    const auto a = compiled_twin.model.parameters();
    const auto b = eager_twin.model.parameters();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(Values(a[i]), Values(b[i])) << "parameter " << i;
  }
};

const char* Name(Opt o) {
  return o == Opt::kSgd ? "SGD" : o == Opt::kNesterov ? "Nesterov" : "AdamW";
}

TEST(EveryCallTest, LossWeightChangedLateReachesTheNextCall) {
  for (Opt opt : {Opt::kSgd, Opt::kNesterov, Opt::kAdamW}) {
    SCOPED_TRACE(Name(opt));
    TwinRun run(opt, {});
    EXPECT_EQ(run.Train(260,
                        [](int i, Trainee& t) {
                          if (i == 150) t.loss_weight = 0.25;
                          if (i == 230) t.loss_weight = 2.0;
                        }),
              -1)
        << run.explain;
    run.ExpectSameParameters();
    EXPECT_GE(run.stats.replays, 250) << run.explain;
    // The first change lifts the weight into an argument; the second needs
    // nothing.
    EXPECT_EQ(run.stats.verify_mismatches, 1) << run.explain;
    EXPECT_EQ(run.stats.traces, 2) << run.explain;
    EXPECT_EQ(run.stats.specializations, 1) << run.explain;
  }
}

// A host number that changes on every call (a schedule computed in the
// step): one rebuild lifts it, then every call replays with its own value.
TEST(EveryCallTest, AHostNumberChangingEveryCallIsLiftedIntoAnArgument) {
  for (Opt opt : {Opt::kSgd, Opt::kAdamW}) {
    SCOPED_TRACE(Name(opt));
    TwinRun run(opt, {});
    EXPECT_EQ(run.Train(120,
                        [](int i, Trainee& t) {
                          t.loss_weight = 1.0 / (1.0 + 0.05 * i);
                          t.max_norm = 0.5 + 0.01 * i;
                        }),
              -1)
        << run.explain;
    run.ExpectSameParameters();
    EXPECT_EQ(run.stats.traces, 2) << run.explain;
    EXPECT_GE(run.stats.replays, 117) << run.explain;
    EXPECT_NE(run.explain.find("takes host numbers that changed as arguments"),
              std::string::npos)
        << run.explain;
    EXPECT_NE(run.explain.find("2 lifted host numbers"), std::string::npos)
        << run.explain;
  }
}

// The lifted numbers are inputs of the compiled graph (%c<k>), never folded
// into its code.
TEST(EveryCallTest, LiftedNumbersAreGraphInputs) {
  double k = 3.0;
  auto fast = compile([&](const Tensor& x) { return sum(relu(x * k + 1.0)); },
                      {.warmup_steps = 0});
  const Tensor x = arange(-2, 3, 1, {.dtype = DType::kF32});
  for (int i = 0; i < 6; ++i) {
    k = 1.0 + i;
    EXPECT_EQ(fast(x).item(), sum(relu(x * k + 1.0)).item()) << "call " << i;
  }
  std::ostringstream ir;
  fast.dump_ir(ir);
  EXPECT_NE(ir.str().find("%c0: f32[] input"), std::string::npos) << ir.str();
  EXPECT_EQ(ir.str().find("value = 6"), std::string::npos) << ir.str();
  EXPECT_NE(ir.str().find("value = 1"), std::string::npos)
      << "the unchanged 1.0 stays a constant\n"
      << ir.str();
  EXPECT_EQ(fast.stats().traces, 2) << fast.explain();
}

// The same change under the sampled check: it is missed, which is what the
// every-call default is for (and why kSampledUnsafe carries its name).
TEST(EveryCallTest, SampledCheckMissesALateChange) {
  TwinRun run(Opt::kSgd, {.verify = Verify::kSampledUnsafe});
  EXPECT_EQ(run.Train(160,
                      [](int i, Trainee& t) {
                        if (i == 150) t.loss_weight = 0.25;
                      }),
            150);
  EXPECT_NE(run.explain.find("UNSAFE: sampled"), std::string::npos)
      << run.explain;
}

TEST(EveryCallTest, ClipThresholdLoweredLateIsUsed) {
  for (Opt opt : {Opt::kNesterov, Opt::kAdamW}) {
    SCOPED_TRACE(Name(opt));
    TwinRun run(opt, {});
    EXPECT_EQ(
        run.Train(220,
                  [](int i, Trainee& t) { t.max_norm = i < 160 ? 5.0 : 0.05; }),
        -1)
        << run.explain;
    run.ExpectSameParameters();
    EXPECT_GE(run.stats.replays, 210) << run.explain;
  }
}

// A host `if` that adds a term every 7th call: two paths, each compiled once
// and both replayed (siblings), not retraced on every switch.
TEST(EveryCallTest, AlternatingPathsReplayBothSpecializations) {
  TwinRun run(Opt::kAdamW, {});
  EXPECT_EQ(run.Train(210, [](int, Trainee& t) { t.every = 7; }), -1)
      << run.explain;
  run.ExpectSameParameters();
  EXPECT_EQ(run.stats.specializations, 2) << run.explain;
  EXPECT_EQ(run.stats.traces, 2) << run.explain;
  EXPECT_GE(run.stats.replays, 205) << run.explain;
  EXPECT_GE(run.stats.sibling_hits, 50) << run.explain;
}

TEST(EveryCallTest, FreezingAndUnfreezingALayerMidRun) {
  for (Opt opt : {Opt::kSgd, Opt::kNesterov, Opt::kAdamW}) {
    SCOPED_TRACE(Name(opt));
    TwinRun run(opt, {});
    EXPECT_EQ(run.Train(330,
                        [&](int i, Trainee& t) {
                          if (i == 140) t.SetFrozen(0, true);
                          if (i == 260) t.SetFrozen(0, false);
                        }),
              -1)
        << run.explain;
    run.ExpectSameParameters();
    EXPECT_GE(run.stats.replays, 320) << run.explain;
  }
}

// A layer frozen from the start and unfrozen late: AdamW creates its moments
// for that layer lazily, during a recording call; they must be real tensors
// holding eager's values afterwards.
TEST(EveryCallTest, UnfreezingLateCreatesRealOptimizerStateInARecordingCall) {
  for (Opt opt : {Opt::kNesterov, Opt::kAdamW}) {
    SCOPED_TRACE(Name(opt));
    TwinRun run(opt, {});
    EXPECT_EQ(run.Train(200,
                        [&](int i, Trainee& t) {
                          if (i == 0) t.SetFrozen(2, true);
                          if (i == 150) t.SetFrozen(2, false);
                        }),
              -1)
        << run.explain;
    run.ExpectSameParameters();
    EXPECT_GE(run.stats.kept_calls, 1) << run.explain;
    EXPECT_GE(run.stats.replays, 190) << run.explain;
  }
}

// The frozen layer's weights do not move while frozen (eager's semantics,
// checked directly rather than only against the twin).
TEST(EveryCallTest, FrozenWeightsStayPutInTheCompiledStep) {
  TwinRun run(Opt::kSgd, {});
  std::vector<float> at_freeze;
  run.Train(200, [&](int i, Trainee& t) {
    if (i == 150 && &t == &run.compiled_twin) {
      t.SetFrozen(0, true);
      at_freeze = Values(t.model->at<nn::LinearImpl>(0)->weight);
    }
  });
  EXPECT_EQ(Values(run.compiled_twin.model->at<nn::LinearImpl>(0)->weight),
            at_freeze);
}

// A compiled function called inside a compiled step (here a compiled,
// no-grad loss scale computed from the model's current output): while the
// outer step traces or checks its host code, the inner one runs as written,
// so that the outer step records its ops and never captures its result as a
// constant; called on its own between steps, the inner one still replays.
// Every call's loss, every inner result and the final parameters equal the
// eager twin's.
TEST(EveryCallTest, ACompiledFunctionInsideACompiledStepRunsAsWritten) {
  Trainee compiled_twin(Opt::kAdamW), eager_twin(Opt::kAdamW);
  auto scale_of = [](Trainee& t, const Tensor& x) {
    NoGradGuard no_grad;
    return 1.0 + mean(abs(t.model(x)));
  };
  auto inner =
      compile([&](const Tensor& x) { return scale_of(compiled_twin, x); });
  auto step_of = [](Trainee& t, const Tensor& x, const Tensor& y,
                    const Tensor& scale) {
    t.optimizer->zero_grad();
    Tensor loss = cross_entropy(t.model(x), y) * scale;
    loss.backward();
    t.optimizer->step();
    return loss;
  };
  auto outer = compile([&](const Tensor& x, const Tensor& y) {
    return step_of(compiled_twin, x, y, inner(x));
  });
  Generator data(4);
  const Tensor x = randn({12, 6}, {}, &data);
  const Tensor y = randint(0, 3, {12}, {.dtype = DType::kI64}, &data);
  const Tensor probe = randn({5, 6}, {}, &data);
  for (int i = 0; i < 40; ++i) {
    SCOPED_TRACE(i);
    const Tensor want = step_of(eager_twin, x, y, scale_of(eager_twin, x));
    ASSERT_EQ(Values(outer(x, y)), Values(want)) << outer.explain();
    ASSERT_EQ(Values(inner(probe)), Values(scale_of(eager_twin, probe)))
        << inner.explain();
  }
  const auto a = compiled_twin.model.parameters();
  const auto b = eager_twin.model.parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(Values(a[i]), Values(b[i])) << "parameter " << i;
  EXPECT_GE(outer.stats().replays, 30) << outer.explain();
  // Its own calls on the probe replay; the ones inside the outer step run
  // as written.
  EXPECT_GE(inner.stats().replays, 30) << inner.explain();
  EXPECT_GE(inner.stats().eager_calls, 40) << inner.explain();
}

// GPT rebuilds its cached positions when the sequence length changes; the
// recording call must leave a real tensor there, and the step must match
// eager whatever the length.
TEST(EveryCallTest, GptWithASequenceLengthThatChangesEveryCall) {
  test::GptTwins twins(/*context=*/16);
  auto fast = compile(
      [&](const Tensor& x, const Tensor& y) { return twins.StepA(x, y); });
  Generator data(9);
  const int lengths[] = {4, 7, 4, 16, 7, 4, 1, 4, 9, 7};
  for (int i = 0; i < 60; ++i) {
    const int64_t t = lengths[i % 10];
    const Tensor x = randint(0, 17, {2, t}, {.dtype = DType::kI64}, &data);
    const Tensor y = randint(0, 17, {2, t}, {.dtype = DType::kI64}, &data);
    const std::vector<float> got = Values(fast(x, y));
    const std::vector<float> want = Values(twins.StepB(x, y));
    ASSERT_EQ(got, want) << "call " << i << " (T = " << t << ")\n"
                         << fast.explain();
  }
  for (size_t i = 0; i < twins.a->parameters().size(); ++i)
    EXPECT_EQ(Values(twins.a->parameters()[i]),
              Values(twins.b->parameters()[i]))
        << i;
  EXPECT_GT(fast.stats().replays, 20) << fast.explain();
}

// Trains two copies of a model (from `make`) with SGD (`sgd`), one compiled
// with the accuracy checker on its first `checks` replays and one without, from
// the same generator seed before each call: a checked call must draw the
// same dropout masks in both of its runs, leave the generator where an
// unchecked call does, and keep a loss within `tolerance` of the unchecked
// replay's (checked calls keep the eager result).
template <typename Model, typename Loss>
void ExpectCheckedRunsLikeUnchecked(const std::function<Model()>& make,
                                    const Loss& loss_of, const Tensor& x,
                                    const Tensor& y, optim::SGDOptions sgd,
                                    DType amp, int checks, double tolerance) {
  Model checked_model = make(), plain_model = make();
  optim::SGD checked_opt(checked_model->parameters(), sgd);
  optim::SGD plain_opt(plain_model->parameters(), sgd);
  auto step = [&](Model& m, optim::SGD& opt, const Tensor& a, const Tensor& b) {
    opt.zero_grad();
    Tensor loss = loss_of(m, a, b);
    loss.backward();
    opt.step();
    return loss;
  };
  CompileOptions options{.check = true, .check_replays = checks, .amp = amp};
  auto checked = compile(
      [&](const Tensor& a, const Tensor& b) {
        return step(checked_model, checked_opt, a, b);
      },
      options);
  options.check = false;
  auto plain = compile(
      [&](const Tensor& a, const Tensor& b) {
        return step(plain_model, plain_opt, a, b);
      },
      options);
  for (int i = 0; i < checks + 4; ++i) {
    manual_seed(1000 + i);
    const float got = Values(checked(x, y))[0];
    const uint64_t offset_checked = default_generator().offset();
    manual_seed(1000 + i);
    const float want = Values(plain(x, y))[0];
    EXPECT_EQ(default_generator().offset(), offset_checked) << "call " << i;
    EXPECT_NEAR(got, want, tolerance) << "call " << i;
  }
  EXPECT_EQ(checked.stats().checks, checks) << checked.explain();
  EXPECT_EQ(checked.stats().check_failures, 0) << checked.check_report();
  EXPECT_NE(checked.check_report().find("OK"), std::string::npos)
      << checked.check_report();
}

// An MLP with dropout: a replay equals eager bit for bit in f32, and within
// bf16's rounding with autocast. Plain SGD: the checker compares a
// compiler-applied bf16 step with eager f32, and a momentum buffer's
// elements near 0 differ by more than bf16's relative tolerance.
TEST(EveryCallTest, CheckerWithDropoutAgreesAndChangesNothing) {
  Generator data(2);
  const Tensor x = randn({16, 6}, {}, &data);
  const Tensor y = randint(0, 3, {16}, {.dtype = DType::kI64}, &data);
  for (DType amp : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(ir::DTypeName(amp));
    ExpectCheckedRunsLikeUnchecked<nn::Sequential>(
        [] {
          manual_seed(13);
          return nn::Sequential(nn::Linear(6, 32), nn::ReLU(),
                                nn::Dropout(0.5), nn::Linear(32, 3));
        },
        [](nn::Sequential& m, const Tensor& a, const Tensor& b) {
          return cross_entropy(m(a), b);
        },
        x, y, {.lr = 0.1}, amp, 5, amp == DType::kF32 ? 0.0 : 2e-2);
  }
}

// A GPT with dropout in attention and the MLPs. SGD with momentum: AdamW
// would turn the key bias's gradient, which is rounding noise around 0
// (softmax does not change when a constant is added to every key), into
// full-size steps whose sign differs between any two summation orders.
TEST(EveryCallTest, CheckerWithDropoutInAGptAgrees) {
  Generator data(6);
  const Tensor x = randint(0, 11, {3, 8}, {.dtype = DType::kI64}, &data);
  const Tensor y = randint(0, 11, {3, 8}, {.dtype = DType::kI64}, &data);
  for (DType amp : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(ir::DTypeName(amp));
    ExpectCheckedRunsLikeUnchecked<nn::GPT>(
        [] {
          manual_seed(3);
          return nn::GPT(nn::GPTOptions{.vocab = 11,
                                        .context = 8,
                                        .d_model = 16,
                                        .heads = 2,
                                        .layers = 1,
                                        .dropout = 0.2});
        },
        [](nn::GPT& m, const Tensor& a, const Tensor& b) {
          return cross_entropy(m(a).reshape({-1, 11}), b.reshape({-1}));
        },
        x, y, {.lr = 0.1, .momentum = 0.9}, amp, 4,
        amp == DType::kF32 ? 1e-5 : 3e-2);
  }
}

// A replay draws what the eager step draws from the same generator state,
// and leaves the generator where eager does, even when the compiled graph
// drops a draw whose result is unused (eager still reserved it).
TEST(EveryCallTest, ReplaysDrawWhatEagerDrawsAndAdvanceTheGeneratorAsEager) {
  auto step = [](const Tensor& x) {
    Tensor unused = dropout(x, 0.5);
    return dropout(x * 2.0, 0.3) + dropout(x, 0.7);
  };
  auto fast = compile(step, {.warmup_steps = 0});
  const Tensor x = ones({64});
  for (int i = 0; i < 5; ++i) {
    manual_seed(70 + i);
    const std::vector<float> got = Values(fast(x));
    const uint64_t offset_compiled = default_generator().offset();
    manual_seed(70 + i);
    const std::vector<float> want = Values(step(x));
    EXPECT_EQ(got, want) << "call " << i;
    EXPECT_EQ(offset_compiled, default_generator().offset()) << "call " << i;
  }
  EXPECT_EQ(fast.stats().replays, 4) << fast.explain();
}

// The optimizer's step is a recorded routine: a recording call that reaches
// it with the same options, the same parameters, grads and state tensors
// takes its ops whole from the record instead of dispatching them.
TEST(EveryCallTest, TheOptimizerStepIsTakenFromTheRecord) {
  for (Opt opt : {Opt::kSgd, Opt::kNesterov, Opt::kAdamW}) {
    SCOPED_TRACE(Name(opt));
    TwinRun run(opt, {});
    EXPECT_EQ(run.Train(30, [](int, Trainee&) {}), -1) << run.explain;
    run.ExpectSameParameters();
    EXPECT_EQ(run.stats.replays, 28) << run.explain;
    EXPECT_EQ(run.stats.verifications, 28) << run.explain;
    // Six parameters, each at least two ops of the update.
    EXPECT_GE(run.stats.verify_routine_ops, 28 * 12) << run.explain;
    EXPECT_LT(run.stats.verify_routine_ops, run.stats.verify_ops)
        << run.explain;
    EXPECT_NE(run.explain.find("taken whole from the record (library module "
                               "forwards, backward, the optimizer's step)"),
              std::string::npos)
        << run.explain;
  }
}

// What decides the optimizer's ops changes between calls: a layer frozen
// (its parameters get no grad) and unfrozen, the optimizer replaced by a
// fresh one (new state tensors, created lazily in its first step), and the
// learning rate set (a tensor the replay reads: no new ops). Each call
// trains exactly like eager.
TEST(EveryCallTest, OptimizerChangesAreNotTakenFromTheRecord) {
  for (Opt opt : {Opt::kSgd, Opt::kNesterov, Opt::kAdamW}) {
    SCOPED_TRACE(Name(opt));
    TwinRun run(opt, {});
    EXPECT_EQ(run.Train(60,
                        [opt](int i, Trainee& t) {
                          auto p = t.model.parameters();
                          if (i == 15 || i == 25) {
                            p[2].set_requires_grad(i == 25);
                            p[3].set_requires_grad(i == 25);
                          }
                          if (i == 35) t.optimizer = MakeOptimizer(opt, p);
                          if (i >= 45) t.optimizer->set_lr(0.01 + 0.001 * i);
                        }),
              -1)
        << run.explain;
    run.ExpectSameParameters();
    EXPECT_GE(run.stats.verify_mismatches, 2) << run.explain;
    EXPECT_GT(run.stats.verify_routine_ops, 0) << run.explain;
  }
}

// Host code that rebinds .grads between backward and the optimizer's step
// on some calls (two same-shaped layers' weight grads swapped): the step
// reads other tensors than the record's, so its ops are not taken from it.
TEST(EveryCallTest, GradsRebindBeforeTheStepOnSomeCalls) {
  for (Opt opt : {Opt::kNesterov, Opt::kAdamW}) {
    SCOPED_TRACE(Name(opt));
    auto make = [opt] {
      manual_seed(8);
      auto model =
          nn::Sequential(nn::Linear(6, 6), nn::Tanh(), nn::Linear(6, 6),
                         nn::Tanh(), nn::Linear(6, 3));
      return std::make_pair(model, MakeOptimizer(opt, model.parameters()));
    };
    auto [ma, oa] = make();
    auto [mb, ob] = make();
    int calls = 0;
    auto step = [&calls](nn::Sequential& m, optim::Optimizer& o,
                         const Tensor& x, const Tensor& y, int call) {
      o.zero_grad();
      Tensor loss = cross_entropy(m(x), y);
      loss.backward();
      if (call % 7 == 3) {
        auto p = m.parameters();
        const Tensor g0 = p[0].grad();
        p[0].set_grad(p[2].grad());
        p[2].set_grad(g0);
      }
      o.step();
      ++calls;
      return loss;
    };
    int call = 0;
    auto fast = compile([&](const Tensor& x, const Tensor& y) {
      return step(ma, *oa, x, y, call);
    });
    Generator data(6);
    const Tensor x = randn({10, 6}, {}, &data);
    const Tensor y = randint(0, 3, {10}, {.dtype = DType::kI64}, &data);
    for (call = 0; call < 40; ++call) {
      ASSERT_EQ(Values(fast(x, y)), Values(step(mb, *ob, x, y, call)))
          << "call " << call << "\n"
          << fast.explain();
    }
    for (size_t i = 0; i < ma.parameters().size(); ++i)
      EXPECT_EQ(Values(ma.parameters()[i]), Values(mb.parameters()[i])) << i;
    EXPECT_GE(fast.stats().replays, 30) << fast.explain();
  }
}

// backward() is a recorded routine too: its ops follow from the autograd
// graph the forward built (each node's op, which inputs need a grad, where
// its edges lead) and the leaves' .grads. Changes that keep every forward op
// but change the graph: a detach() inserted on some calls (it dispatches no
// op), and a post-accumulate hook added mid-run (code no key covers).
TEST(EveryCallTest, BackwardChangesThatKeepTheForwardAreSeen) {
  struct Net {
    explicit Net(Opt opt) {
      manual_seed(12);
      first = nn::Linear(6, 8);
      last = nn::Linear(8, 3);
      params = first->parameters();
      for (const Tensor& p : last->parameters()) params.push_back(p);
      optimizer = MakeOptimizer(opt, params);
    }
    nn::Linear first{nn::Linear(6, 8)}, last{nn::Linear(8, 3)};
    std::vector<Tensor> params;
    std::unique_ptr<optim::Optimizer> optimizer;
    Tensor Step(const Tensor& x, const Tensor& y, int call) {
      optimizer->zero_grad();
      Tensor h = tanh(first(x));
      // On every third call the first layer gets no gradient.
      if (call % 3 == 1) h = h.detach();
      Tensor loss = cross_entropy(last(h), y);
      loss.backward();
      optimizer->step();
      return loss;
    }
  };
  for (Opt opt : {Opt::kSgd, Opt::kAdamW}) {
    SCOPED_TRACE(Name(opt));
    Net a(opt), b(opt);
    int call = 0;
    auto fast = compile(
        [&](const Tensor& x, const Tensor& y) { return a.Step(x, y, call); });
    Generator data(2);
    const Tensor x = randn({9, 6}, {}, &data);
    const Tensor y = randint(0, 3, {9}, {.dtype = DType::kI64}, &data);
    int hooks = 0;
    for (call = 0; call < 40; ++call) {
      if (call == 20) {
        // Halve the last layer's weight gradient from now on, in both.
        for (Net* n : {&a, &b}) {
          autograd::AddPostAccumulateGradHook(n->params[2],
                                              [&hooks](const Tensor& leaf) {
                                                ++hooks;
                                                leaf.grad().mul_(0.5);
                                              });
        }
      }
      ASSERT_EQ(Values(fast(x, y)), Values(b.Step(x, y, call)))
          << "call " << call << "\n"
          << fast.explain();
    }
    for (size_t i = 0; i < a.params.size(); ++i)
      EXPECT_EQ(Values(a.params[i]), Values(b.params[i])) << i;
    EXPECT_GE(hooks, 2 * 20) << fast.explain();
    EXPECT_GT(fast.stats().verify_routine_ops, 0) << fast.explain();
    EXPECT_GE(fast.stats().replays, 30) << fast.explain();
  }
}

// A recording call that matches its expected record does not hold the
// state tensors it binds: it borrows them from the expected specialization
// (which holds them), and FullRecord puts them in. A call that stops
// matching holds every one of them itself, in order, before its own: what
// it recorded may outlive the specialization it was checked against.
TEST(EveryCallTest, ARecordingCallBorrowsTheStateItsSpecializationHolds) {
  manual_seed(3);
  nn::Linear model(4, 3);
  optim::SGD opt(model->parameters(),
                 optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  const Tensor x = randn({5, 4});
  const Tensor extra = randn({3});
  bool with_extra = false;
  auto step = [&]() -> std::vector<Tensor> {
    opt.zero_grad();
    Tensor out = model(x);
    Tensor loss = mean(out * out);
    loss.backward();
    opt.step();
    // Read after the step: a state tensor the expected record lacks.
    if (with_extra) loss = loss + sum(extra * extra);
    return {loss};
  };
  for (int i = 0; i < 2; ++i) step();  // the momentum buffers exist
  frontend::ShapeOnlyTrace first =
      frontend::TraceShapesOnly("borrow", {x}, step);
  ASSERT_TRUE(first.inconclusive.empty()) << first.inconclusive;
  const std::vector<Tensor> state = first.trace.state;
  // The weight, the bias, their momentum buffers, the step count, the lr.
  ASSERT_GE(state.size(), 4u);

  frontend::ShapeOnlyTrace same = frontend::TraceShapesOnly(
      "borrow", {x}, step, &first.trace.record, state);
  ASSERT_TRUE(same.trace.matched);
  EXPECT_TRUE(same.trace.state.empty());
  EXPECT_EQ(same.trace.borrowed_state, state.size());
  frontend::FullRecord(same);
  ASSERT_EQ(same.trace.state.size(), state.size());
  for (size_t i = 0; i < state.size(); ++i)
    EXPECT_EQ(same.trace.state[i].impl(), state[i].impl()) << i;

  with_extra = true;
  frontend::ShapeOnlyTrace other = frontend::TraceShapesOnly(
      "borrow", {x}, step, &first.trace.record, state);
  ASSERT_TRUE(other.inconclusive.empty()) << other.inconclusive;
  EXPECT_FALSE(other.trace.matched);
  EXPECT_EQ(other.trace.borrowed_state, 0u);
  ASSERT_EQ(other.trace.state.size(), state.size() + 1);
  for (size_t i = 0; i < state.size(); ++i)
    EXPECT_EQ(other.trace.state[i].impl(), state[i].impl()) << i;
  EXPECT_EQ(other.trace.state.back().impl(), extra.impl());
}

}  // namespace
}  // namespace stepjit
