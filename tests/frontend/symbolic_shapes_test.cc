// Input sizes that change between calls (Shapes::kDynamic): a call whose
// arguments differ from a compiled specialization only in some dims compiles
// its recording for the new sizes and replays it, with no eager trace; the
// shapes of one step count as one specialization against max_traces.
//
// Each test trains a compiled model beside an eager twin that starts
// identical and compares every call's loss and the final parameters exactly
// (compiled f32 CPU steps are bit-identical to eager) unless a tolerance is
// stated.
#include <functional>
#include <memory>
#include <set>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/util/gpt_twins.h"

namespace stepjit {
namespace {

std::vector<float> Values(const Tensor& t) {
  return t.contiguous().to(DType::kF32).to_vector<float>();
}

enum class Opt { kSgd, kNesterovClipped, kAdamW, kDropoutAdamW };
// Test names, in Opt's order.
constexpr const char* kOptNames[] = {"Sgd", "NesterovClipped", "AdamW",
                                     "DropoutAdamW"};

struct Trainee {
  explicit Trainee(Opt o) : opt(o) {
    manual_seed(31);
    if (o == Opt::kDropoutAdamW) {
      model = nn::Sequential(nn::Linear(5, 24), nn::ReLU(), nn::Dropout(0.3),
                             nn::Linear(24, 4));
    } else {
      model = nn::Sequential(nn::Linear(5, 24), nn::Tanh(), nn::Linear(24, 4));
    }
    if (o == Opt::kSgd) {
      optimizer = std::make_unique<optim::SGD>(model.parameters(),
                                               optim::SGDOptions{.lr = 0.05});
    } else if (o == Opt::kNesterovClipped) {
      optimizer = std::make_unique<optim::SGD>(
          model.parameters(),
          optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
    } else {
      optimizer = std::make_unique<optim::AdamW>(
          model.parameters(), optim::AdamWOptions{.lr = 1e-2});
    }
  }
  Opt opt;
  nn::Sequential model{nullptr};
  std::unique_ptr<optim::Optimizer> optimizer;
  double loss_weight = 1.0;

  Tensor Step(const Tensor& x, const Tensor& y) {
    optimizer->zero_grad();
    Tensor loss = cross_entropy(model(x), y) * loss_weight;
    loss.backward();
    if (opt == Opt::kNesterovClipped)
      nn::utils::clip_grad_norm_(model.parameters(), 0.5);
    optimizer->step();
    return loss;
  }
};

// Trains a compiled twin and an eager twin on batches of the given sizes
// (each call's batch drawn from one generator), with `change(call, twin)`
// applied to both before each call; expects every loss and the final
// parameters equal. The same manual seed before both twins' calls gives
// dropout the same draw.
struct Twins {
  Twins(Opt opt, CompileOptions options) : compiled(opt), eager(opt) {
    step = std::make_unique<Step>(
        compile(Fn([this](const Tensor& x, const Tensor& y) {
                  return compiled.Step(x, y);
                }),
                std::move(options)));
  }
  using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;
  using Step = CompiledStep<Fn>;
  Trainee compiled, eager;
  std::unique_ptr<Step> step;

  void Train(const std::vector<int64_t>& sizes,
             const std::function<void(int, Trainee&)>& change = {}) {
    Generator data(7);
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Tensor x = randn({sizes[i], 5}, {}, &data);
      const Tensor y = randint(0, 4, {sizes[i]}, {.dtype = DType::kI64}, &data);
      if (change) {
        change(static_cast<int>(i), compiled);
        change(static_cast<int>(i), eager);
      }
      manual_seed(500 + static_cast<int>(i));
      const std::vector<float> got = Values((*step)(x, y));
      manual_seed(500 + static_cast<int>(i));
      const std::vector<float> want = Values(eager.Step(x, y));
      ASSERT_EQ(got, want) << "call " << i << " (batch " << sizes[i] << ")\n"
                           << step->explain();
    }
    const auto a = compiled.model.parameters();
    const auto b = eager.model.parameters();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(Values(a[i]), Values(b[i])) << "parameter " << i;
  }
};

// Odd sizes among them (2, 7, 127, 1000); 1 stays specialized (it changes
// broadcasting), so it is traced on its own.
std::vector<int64_t> RandomSizes(int calls, bool with_one) {
  Generator g(3);
  const Tensor r = randint(2, 64, {calls}, {.dtype = DType::kI64}, &g);
  std::vector<int64_t> sizes = r.to_vector<int64_t>();
  sizes[3] = 2;
  sizes[5] = 7;
  sizes[8] = 127;
  sizes[11] = 1000;
  if (with_one) sizes[14] = 1;
  return sizes;
}

class RandomBatchSizes : public ::testing::TestWithParam<Opt> {};

TEST_P(RandomBatchSizes, ReplayEveryNewSizeWithoutAnEagerTrace) {
  const std::vector<int64_t> sizes = RandomSizes(40, /*with_one=*/true);
  Twins t(GetParam(), {});
  t.Train(sizes);
  const CompileStats s = t.step->stats();
  const std::string explain = t.step->explain();
  // The warmup call, the first trace, and batch 1's own trace ran eagerly;
  // every other call (a new size included) replayed.
  EXPECT_EQ(s.eager_calls, 3) << explain;
  EXPECT_EQ(s.traces, 2) << explain;
  EXPECT_EQ(s.replays, 37) << explain;
  const std::set<int64_t> distinct(sizes.begin() + 1, sizes.end());
  EXPECT_EQ(s.shape_builds, static_cast<int64_t>(distinct.size()) - 2)
      << explain;
  EXPECT_NE(explain.find("symbolic dims: x0 dim 0 (2.."), std::string::npos)
      << explain;
  EXPECT_NE(explain.find("x1 dim 0"), std::string::npos) << explain;
  EXPECT_NE(explain.find("a concrete shape of specialization 0"),
            std::string::npos)
      << explain;
  // The shapes built from recordings share shape-generic kernels: however
  // many sizes came, the kernels compiled are those of about one shape (a
  // region whose sizes coincide can compile apart), not one set per size.
  EXPECT_GE(s.shape_builds, 10) << explain;
  EXPECT_GT(s.shape_kernels, 0) << explain;
  EXPECT_LE(s.shape_kernels * 5, s.shape_regions)
      << s.shape_kernels << " kernels compiled for " << s.shape_regions
      << " regions of " << s.shape_builds << " shapes\n"
      << explain;
  EXPECT_NE(explain.find("shape-generic kernels"), std::string::npos)
      << explain;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, RandomBatchSizes,
                         ::testing::Values(Opt::kSgd, Opt::kNesterovClipped,
                                           Opt::kAdamW, Opt::kDropoutAdamW),
                         [](const auto& info) {
                           return kOptNames[static_cast<int>(info.param)];
                         });

// A loss weight that changes every call while the batch size changes too:
// the number is lifted once and stays an argument in every new shape.
TEST(SymbolicShapesTest, LiftedNumbersStayArgumentsInNewShapes) {
  Twins t(Opt::kAdamW, {});
  t.Train(RandomSizes(30, /*with_one=*/false),
          [](int call, Trainee& tr) { tr.loss_weight = 1.0 + 0.125 * call; });
  const CompileStats s = t.step->stats();
  EXPECT_LE(s.traces, 2) << t.step->explain();
  EXPECT_GE(s.replays, 27) << t.step->explain();
  EXPECT_NE(t.step->explain().find("lifted host number"), std::string::npos)
      << t.step->explain();
}

// Shapes::kStatic keeps the old rule: every shape is traced eagerly and
// counts against max_traces; past it the step runs eagerly and says why.
TEST(SymbolicShapesTest, StaticShapesTraceEachSizeAndStopAtTheLimit) {
  Twins t(Opt::kSgd, {.max_traces = 3, .shapes = Shapes::kStatic});
  t.Train({16, 16, 8, 8, 12, 20, 20, 16});
  const CompileStats s = t.step->stats();
  const std::string explain = t.step->explain();
  EXPECT_EQ(s.traces, 3) << explain;
  EXPECT_EQ(s.shape_builds, 0) << explain;
  EXPECT_EQ(s.fallbacks, 2) << explain;
  EXPECT_NE(explain.find("3 specializations already made (max_traces)"),
            std::string::npos)
      << explain;
  EXPECT_NE(explain.find("Shapes::kStatic"), std::string::npos) << explain;
}

// With dynamic_dims, only the declared dims may be symbolic.
TEST(SymbolicShapesTest, DynamicDimsNameTheDimsThatMayVary) {
  int calls = 0;
  auto step = [&](const Tensor& x) {
    ++calls;
    return sum(relu(x) * 3.0, {1});
  };
  auto fast = compile(step, {.warmup_steps = 0, .dynamic_dims = {{0, 0}}});
  Generator g(1);
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {4, 6}, {4, 6}, {9, 6}, {9, 6}, {4, 10}, {4, 10}}) {
    const Tensor x = randn({rows, cols}, {}, &g);
    EXPECT_EQ(Values(fast(x)), Values(step(x))) << rows << "x" << cols;
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 2) << fast.explain();        // [4, 6], then [4, 10]
  EXPECT_EQ(s.shape_builds, 1) << fast.explain();  // [9, 6]
  EXPECT_EQ(s.replays, 4) << fast.explain();

  EXPECT_THROW(compile(step, {.dynamic_dims = {{1, 0}}})(randn({3, 3})), Error);
  EXPECT_THROW(compile(step, {.dynamic_dims = {{0, 2}}})(randn({3, 3})), Error);
}

// Beyond max_shapes the least recently used concrete shape is dropped and,
// when it comes back, compiled again from that call's recording.
TEST(SymbolicShapesTest, MaxShapesDropsTheLeastRecentlyUsedShape) {
  Twins t(Opt::kNesterovClipped, {.max_shapes = 3});
  std::vector<int64_t> sizes;
  for (int i = 0; i < 30; ++i) sizes.push_back(4 + (i % 5) * 3);
  t.Train(sizes);
  const CompileStats s = t.step->stats();
  EXPECT_EQ(s.traces, 1) << t.step->explain();
  EXPECT_LE(s.specializations, 3) << t.step->explain();
  EXPECT_GT(s.shapes_evicted, 0) << t.step->explain();
  EXPECT_EQ(s.shape_builds - s.shapes_evicted, s.specializations - 1)
      << t.step->explain();
  EXPECT_EQ(s.replays, 28) << t.step->explain();
}

// A host branch on a size records other ops at that size: a specialization
// of its own, never a shape of the other.
TEST(SymbolicShapesTest, AHostBranchOnASizeIsItsOwnSpecialization) {
  auto step = [](const Tensor& x) {
    Tensor y = x * 2.0;
    if (x.size(0) > 8) y = y + 1.0;
    return sum(y);
  };
  auto fast = compile(step, {.warmup_steps = 0});
  Generator g(2);
  for (int64_t n : {4, 6, 12, 5, 16, 12, 4}) {
    const Tensor x = randn({n}, {}, &g);
    EXPECT_EQ(Values(fast(x)), Values(step(x))) << n;
  }
  const std::string explain = fast.explain();
  // The first size traced eagerly; the branch's first size was compiled
  // from its recording as a specialization of its own (a second trace);
  // every other size is a shape of one of the two.
  EXPECT_EQ(fast.stats().traces, 2) << explain;
  EXPECT_EQ(fast.stats().shape_builds, 3) << explain;
  EXPECT_EQ(fast.stats().specializations, 5) << explain;
  EXPECT_EQ(fast.stats().replays, 6) << explain;
  EXPECT_NE(explain.find("host branch on a size"), std::string::npos)
      << explain;
}

// A GPT whose sequence length changes every call: one trace, then every
// length is a concrete shape (positions rebuilt in a recording call are made
// real before the replay).
TEST(SymbolicShapesTest, GptSequenceLengthsAreShapesOfOneSpecialization) {
  test::GptTwins twins(/*context=*/32, /*clip_grads=*/true);
  auto fast = compile(
      [&](const Tensor& x, const Tensor& y) { return twins.StepA(x, y); });
  Generator data(9);
  const int lengths[] = {8, 13, 2, 31, 7, 8, 20, 13, 27, 5, 3};
  for (int i = 0; i < 44; ++i) {
    const int64_t t = lengths[i % 11];
    const Tensor x = randint(0, 17, {3, t}, {.dtype = DType::kI64}, &data);
    const Tensor y = randint(0, 17, {3, t}, {.dtype = DType::kI64}, &data);
    ASSERT_EQ(Values(fast(x, y)), Values(twins.StepB(x, y)))
        << "call " << i << " (T = " << t << ")\n"
        << fast.explain();
  }
  for (size_t i = 0; i < twins.a->parameters().size(); ++i)
    EXPECT_EQ(Values(twins.a->parameters()[i]),
              Values(twins.b->parameters()[i]))
        << i;
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 1) << fast.explain();
  EXPECT_EQ(s.replays, 42) << fast.explain();
  EXPECT_EQ(s.shape_builds, 8) << fast.explain();
  // Eight lengths, the kernels of about one (attention's [T, T] regions
  // and the like are the same code at every T).
  EXPECT_LE(s.shape_kernels * 4, s.shape_regions) << fast.explain();
  EXPECT_NE(fast.explain().find("symbolic dims: x0 dim 1 (2..31), x1 dim 1"),
            std::string::npos)
      << fast.explain();
}

// Mixed precision applied by the compiler (bf16; f16 with the grad-scaler
// pass) on random batch sizes: one trace, and each call's loss within the
// low precision's rounding of the eager f32 step's (a replay computes in the
// low precision, eager in f32).
TEST(SymbolicShapesTest, MixedPrecisionOnRandomBatchSizes) {
  for (DType low : {DType::kBF16, DType::kF16}) {
    Twins t(Opt::kAdamW, {.amp = low});
    Generator data(7);
    const std::vector<int64_t> sizes = RandomSizes(24, /*with_one=*/false);
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Tensor x = randn({sizes[i], 5}, {}, &data);
      const Tensor y = randint(0, 4, {sizes[i]}, {.dtype = DType::kI64}, &data);
      const float got = Values((*t.step)(x, y))[0];
      const float want = Values(t.eager.Step(x, y))[0];
      EXPECT_NEAR(got, want, 0.03 * std::abs(want))
          << ir::DTypeName(low) << " call " << i << " (batch " << sizes[i]
          << ")";
    }
    const CompileStats s = t.step->stats();
    EXPECT_EQ(s.traces, 1) << t.step->explain();
    EXPECT_EQ(s.replays, 22) << t.step->explain();
    if (low == DType::kF16) {
      EXPECT_GT(s.loss_scale, 0) << t.step->explain();
      EXPECT_EQ(s.skipped_steps, 0) << t.step->explain();
    }
  }
}

}  // namespace
}  // namespace stepjit
