// A library module's forward as one recorded routine: a recording call that
// matches its record takes a Sequential, MultiheadAttention, TransformerBlock
// or GPT forward whole from the record instead of dispatching its ops, and
// must still see every change that alters the step's result: requires_grad
// flipped, a submodule replaced, a user subclass of a library layer, the
// training flag, a gradient hook added (the backward then runs op by op and
// the stood-in forward's ops are dispatched again first), a loss path that
// changes after the forward.
//
// Each test trains a compiled model beside an eager twin that starts
// identical and compares every call's loss and the final parameters exactly
// (compiled f32 CPU steps are bit-identical to eager).
#include <functional>
#include <memory>

#include "absl/base/casts.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "runtime/autograd/engine.h"

namespace stepjit {
namespace {

std::vector<float> Values(const Tensor& t) {
  return t.contiguous().to(DType::kF32).to_vector<float>();
}

// A Linear whose forward scales its output: a user's subclass, whose code
// the library cannot describe.
class ScaledLinearImpl : public nn::LinearImpl {
 public:
  ScaledLinearImpl(int64_t in, int64_t out) : nn::LinearImpl(in, out) {}
  Tensor forward(const Tensor& x) override {
    return nn::LinearImpl::forward(x) * scale;
  }
  double scale = 1.0;
};

struct Mlp {
  Mlp() {
    manual_seed(3);
    scaled = std::make_shared<ScaledLinearImpl>(16, 16);
    model = nn::Sequential(nn::Linear(6, 16), nn::ReLU(), nn::Linear(16, 16),
                           nn::GELU(), nn::Linear(16, 3));
    with_user_layer = nn::Sequential(nn::Linear(6, 16), nn::Tanh(), scaled,
                                     nn::ReLU(), nn::Linear(16, 3));
  }
  nn::Sequential model{nullptr}, with_user_layer{nullptr};
  std::shared_ptr<ScaledLinearImpl> scaled;
};

// Runs `calls` calls of `step` on a compiled twin and an eager twin (each
// made by `make`), calling `change(call, twin)` on both before each call;
// expects every loss and, at the end, every parameter to match exactly.
template <typename Twin>
CompileStats TrainTwins(
    int calls, const std::function<std::unique_ptr<Twin>()>& make,
    const std::function<Tensor(Twin&, const Tensor&, const Tensor&)>& step,
    const std::function<void(int, Twin&)>& change,
    const std::function<std::pair<Tensor, Tensor>(int)>& batch) {
  std::unique_ptr<Twin> a = make(), b = make();
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return step(*a, x, y); });
  for (int i = 0; i < calls; ++i) {
    change(i, *a);
    change(i, *b);
    const auto [x, y] = batch(i);
    const std::vector<float> got = Values(fast(x, y));
    const std::vector<float> want = Values(step(*b, x, y));
    EXPECT_EQ(got, want) << "call " << i << "\n" << fast.explain();
    if (got != want) break;
  }

  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(Values(pa[i]), Values(pb[i])) << "parameter " << i;
  return fast.stats();
}

struct MlpTwin {
  explicit MlpTwin(bool user_layer) {
    model = user_layer ? mlp.with_user_layer : mlp.model;
    opt = std::make_unique<optim::AdamW>(model->parameters(),
                                         optim::AdamWOptions{.lr = 1e-2});
  }
  std::vector<Tensor> parameters() const { return model->parameters(); }
  Mlp mlp;
  nn::Sequential model{nullptr};
  std::unique_ptr<optim::AdamW> opt;
  double extra = 0.0;  // >0: an extra term after the forward
};

// Cross-entropy of `logits` [N, C] against `y` [N], plus `extra` times the
// mean square of the logits when `extra` > 0; backward and an optimizer step.
Tensor LossBackwardStep(optim::Optimizer& opt, const Tensor& logits,
                        const Tensor& y, double extra) {
  Tensor loss = cross_entropy(logits, y);
  if (extra > 0) loss = loss + extra * mean(logits * logits);
  loss.backward();
  opt.step();
  return loss;
}

Tensor MlpStep(MlpTwin& t, const Tensor& x, const Tensor& y) {
  t.opt->zero_grad();
  return LossBackwardStep(*t.opt, t.model(x), y, t.extra);
}

std::pair<Tensor, Tensor> MlpBatch(int i) {
  Generator data(100 + i % 4);
  return {randn({9, 6}, {}, &data),
          randint(0, 3, {9}, {.dtype = DType::kI64}, &data)};
}

std::function<std::unique_ptr<MlpTwin>()> MakeMlp(bool user_layer) {
  return [user_layer] { return std::make_unique<MlpTwin>(user_layer); };
}

TEST(ModuleRoutineTest, ASequentialForwardIsTakenWholeFromTheRecord) {
  const CompileStats stats = TrainTwins<MlpTwin>(
      40, MakeMlp(false), MlpStep, [](int, MlpTwin&) {}, MlpBatch);
  EXPECT_EQ(stats.traces, 1);
  EXPECT_GE(stats.replays, 35);
  // Forward, backward and the optimizer's step all come from the record;
  // only the loss is dispatched op by op.
  ASSERT_GT(stats.verify_ops, 0);
  EXPECT_GE(static_cast<double>(stats.verify_routine_ops) /
                static_cast<double>(stats.verify_ops),
            0.9)
      << stats.verify_routine_ops << " of " << stats.verify_ops;
}

TEST(ModuleRoutineTest, FreezingAndUnfreezingALayerInsideTheForward) {
  TrainTwins<MlpTwin>(
      60, MakeMlp(false), MlpStep,
      [](int i, MlpTwin& t) {
        auto fc = t.model->at<nn::LinearImpl>(2);
        if (i == 20 || i == 40) {
          fc->weight.set_requires_grad(i == 40);
          fc->bias.set_requires_grad(i == 40);
        }
      },
      MlpBatch);
}

TEST(ModuleRoutineTest, AUserSubclassOfALibraryLayerIsRunAsWritten) {
  const CompileStats stats = TrainTwins<MlpTwin>(
      40, MakeMlp(true), MlpStep,
      [](int i, MlpTwin& t) {
        if (i >= 15) t.mlp.scaled->scale = 1.0 + 0.01 * i;
      },
      MlpBatch);
  // The Sequential holding the user's layer cannot be described: its ops
  // are recorded and compared one by one.
  EXPECT_LT(static_cast<double>(stats.verify_routine_ops) /
                static_cast<double>(stats.verify_ops),
            0.9);
}

TEST(ModuleRoutineTest, ALossPathThatChangesAfterTheForward) {
  // Every third call adds a term after the stood-in forward: that call's
  // backward cannot come from the record, so the forward's ops are
  // dispatched again for it; both paths replay.
  const CompileStats stats = TrainTwins<MlpTwin>(
      45, MakeMlp(false), MlpStep,
      [](int i, MlpTwin& t) { t.extra = i % 3 == 0 ? 0.1 : 0.0; }, MlpBatch);
  EXPECT_LE(stats.traces, 3);
  EXPECT_GE(stats.replays, 35);
}

TEST(ModuleRoutineTest, AGradientHookAddedMidRun) {
  TrainTwins<MlpTwin>(
      30, MakeMlp(false), MlpStep,
      [](int i, MlpTwin& t) {
        if (i != 12) return;
        autograd::AddPostAccumulateGradHook(
            t.model->at<nn::LinearImpl>(0)->weight, [](const Tensor& leaf) {
              NoGradGuard no_grad;
              leaf.grad().mul_(0.5);
            });
      },
      MlpBatch);
}

TEST(ModuleRoutineTest, TrainAndEvalWithDropoutFlipEveryFewCalls) {
  struct Twin {
    Twin() {
      manual_seed(8);
      model = nn::Sequential(nn::Linear(6, 16), nn::ReLU(), nn::Dropout(0.3),
                             nn::Linear(16, 3));
      opt = std::make_unique<optim::SGD>(
          model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    }
    Tensor Step(const Tensor& x, const Tensor& y) {
      opt->zero_grad();
      return LossBackwardStep(*opt, model(x), y, 0.0);
    }
    nn::Sequential model{nullptr};
    std::unique_ptr<optim::SGD> opt;
  };
  Twin a, b;
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return a.Step(x, y); });
  for (int i = 0; i < 42; ++i) {
    a.model->train((i / 5) % 2 == 0);
    b.model->train((i / 5) % 2 == 0);
    const auto [x, y] = MlpBatch(i);
    // Both twins draw the same masks on a call.
    manual_seed(1000 + i);
    const std::vector<float> got = Values(fast(x, y));
    manual_seed(1000 + i);
    const std::vector<float> want = Values(b.Step(x, y));
    ASSERT_EQ(got, want) << "call " << i << "\n" << fast.explain();
  }
  const auto pa = a.model->parameters(), pb = b.model->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(Values(pa[i]), Values(pb[i])) << "parameter " << i;
  EXPECT_GE(fast.stats().replays, 30) << fast.explain();
  // Dropout's draws are taken from the record too, from where the
  // generator is on each call.
  EXPECT_GE(static_cast<double>(fast.stats().verify_routine_ops) /
                static_cast<double>(fast.stats().verify_ops),
            0.9)
      << fast.explain();
}

std::pair<Tensor, Tensor> GptBatch(int i);

TEST(ModuleRoutineTest, AGptWithDropoutAndALossPathThatChanges) {
  struct Twin {
    Twin() {
      manual_seed(6);
      model = nn::GPT(nn::GPTOptions{.vocab = 13,
                                     .context = 8,
                                     .d_model = 16,
                                     .heads = 2,
                                     .layers = 2,
                                     .dropout = 0.2});
      opt = std::make_unique<optim::AdamW>(model->parameters(),
                                           optim::AdamWOptions{.lr = 1e-2});
    }
    Tensor Step(const Tensor& x, const Tensor& y, double extra) {
      opt->zero_grad();
      return LossBackwardStep(*opt, model(x).reshape({-1, 13}), y.reshape({-1}),
                              extra);
    }
    nn::GPT model{nullptr};
    std::unique_ptr<optim::AdamW> opt;
  };
  Twin a, b;
  manual_seed(500);
  double extra = 0.0;
  auto fast = compile(
      [&](const Tensor& x, const Tensor& y) { return a.Step(x, y, extra); });
  for (int i = 0; i < 30; ++i) {
    // Every fifth call adds a term after the forward: its backward runs op
    // by op, through the forward's ops dispatched again with this call's
    // draws.
    extra = i % 5 == 4 ? 0.05 : 0.0;
    // From call 20 a hook on the token embedding: every backward runs op by
    // op while the call still matches its record.
    if (i == 20) {
      for (Twin* t : {&a, &b}) {
        autograd::AddPostAccumulateGradHook(t->model->tok->weight,
                                            [](const Tensor& leaf) {
                                              NoGradGuard no_grad;
                                              leaf.grad().mul_(0.5);
                                            });
      }
    }
    const auto [x, y] = GptBatch(i);
    // Both twins draw from the same offset, which grows from call to call
    // (a call's draws are not where the recorded call's were).
    const uint64_t offset = default_generator().offset();
    const std::vector<float> got = Values(fast(x, y));
    default_generator().set_offset(offset);
    const std::vector<float> want = Values(b.Step(x, y, extra));
    ASSERT_EQ(got, want) << "call " << i << "\n" << fast.explain();
  }
  const auto pa = a.model->parameters(), pb = b.model->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(Values(pa[i]), Values(pb[i])) << "parameter " << i;
  EXPECT_GE(fast.stats().replays, 24) << fast.explain();
  EXPECT_GT(fast.stats().verify_routine_ops, fast.stats().verify_ops / 2)
      << fast.explain();
}

struct GptTwin {
  GptTwin() {
    manual_seed(5);
    model = nn::GPT(nn::GPTOptions{
        .vocab = 13, .context = 8, .d_model = 16, .heads = 2, .layers = 2});
    opt = std::make_unique<optim::AdamW>(model->parameters(),
                                         optim::AdamWOptions{.lr = 1e-2});
  }
  std::vector<Tensor> parameters() const { return model->parameters(); }
  nn::GPT model{nullptr};
  std::unique_ptr<optim::AdamW> opt;
  double extra = 0.0;
};

Tensor GptStep(GptTwin& t, const Tensor& x, const Tensor& y) {
  t.opt->zero_grad();
  return LossBackwardStep(*t.opt, t.model(x).reshape({-1, 13}), y.reshape({-1}),
                          t.extra);
}

std::pair<Tensor, Tensor> GptBatch(int i) {
  Generator data(50 + i % 3);
  return {randint(0, 13, {3, 8}, {.dtype = DType::kI64}, &data),
          randint(0, 13, {3, 8}, {.dtype = DType::kI64}, &data)};
}

TEST(ModuleRoutineTest, AGptForwardIsTakenWholeAndItsPathsStillChange) {
  const CompileStats stats = TrainTwins<GptTwin>(
      36, [] { return std::make_unique<GptTwin>(); }, GptStep,
      [](int i, GptTwin& t) {
        t.extra = i >= 20 && i % 4 == 0 ? 0.05 : 0.0;
        // A block's MLP replaced mid-run by a fresh layer (which the
        // optimizer does not update, in both twins).
        if (i == 28) {
          manual_seed(77);
          t.model->blocks[1]->fc2 = nn::Linear(64, 16);
        }
      },
      GptBatch);
  // Two paths, then the new layer (new state; its .grad, which no
  // optimizer clears, goes from unset to set once) on both paths.
  EXPECT_LE(stats.traces, 5);
  EXPECT_GE(stats.replays, 25);
  EXPECT_GT(stats.verify_routine_ops, stats.verify_ops / 2);
}

TEST(ModuleRoutineTest, AGptInEvalWithoutGradIsStoodInForWithoutAutograd) {
  GptTwin a, b;
  a.model->eval();
  b.model->eval();
  auto eval = [](GptTwin& t, const Tensor& x, const Tensor& y) {
    NoGradGuard no_grad;
    return cross_entropy(t.model(x).reshape({-1, 13}), y.reshape({-1}));
  };
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return eval(a, x, y); });
  for (int i = 0; i < 12; ++i) {
    const auto [x, y] = GptBatch(i);
    EXPECT_EQ(Values(fast(x, y)), Values(eval(b, x, y))) << "call " << i;
  }
  EXPECT_GE(fast.stats().replays, 8) << fast.explain();
  EXPECT_GT(fast.stats().verify_routine_ops, 0) << fast.explain();
}

// A user's module that declares what decides its forward (its own tag and
// its layers), so that a recording call can stand in for it too.
class DeclaredNetImpl : public nn::Module {
 public:
  DeclaredNetImpl() {
    fc1 = register_module("fc1", nn::Linear(6, 16));
    fc2 = register_module("fc2", nn::Linear(16, 3));
  }
  Tensor forward(const Tensor& x) override {
    return RecordedForward(x, [&] { return fc2(relu(fc1(x)) * scale); });
  }
  bool DescribeForward(std::vector<uint64_t>& key,
                       runtime::RoutineTensors& tensors) const override {
    if (!nn::IsExactly<DeclaredNetImpl>(*this)) return false;
    key.insert(key.end(),
               {0x4e6574 /* "Net" */, absl::bit_cast<uint64_t>(scale)});
    return nn::DescribeModule(fc1.ptr().get(), key, tensors) &&
           nn::DescribeModule(fc2.ptr().get(), key, tensors);
  }
  nn::Linear fc1{nullptr}, fc2{nullptr};
  double scale = 1.0;  // read by forward: part of the declaration
};

TEST(ModuleRoutineTest, AUserModuleThatDeclaresItselfIsStoodInFor) {
  struct Twin {
    Twin() {
      manual_seed(12);
      net = std::make_shared<DeclaredNetImpl>();
      opt = std::make_unique<optim::AdamW>(net->parameters(),
                                           optim::AdamWOptions{.lr = 1e-2});
    }
    std::vector<Tensor> parameters() const { return net->parameters(); }
    std::shared_ptr<DeclaredNetImpl> net;
    std::unique_ptr<optim::AdamW> opt;
  };
  const CompileStats stats = TrainTwins<Twin>(
      40, [] { return std::make_unique<Twin>(); },
      [](Twin& t, const Tensor& x, const Tensor& y) {
        t.opt->zero_grad();
        return LossBackwardStep(*t.opt, (*t.net)(x), y, 0.0);
      },
      [](int i, Twin& t) {
        if (i == 25) t.net->scale = 0.5;  // a declared value changes
        if (i == 30) t.net->fc2->bias.set_requires_grad(false);
      },
      MlpBatch);
  EXPECT_GE(static_cast<double>(stats.verify_routine_ops) /
                static_cast<double>(stats.verify_ops),
            0.8)
      << stats.verify_routine_ops << " of " << stats.verify_ops;
}

}  // namespace
}  // namespace stepjit
