// compile(step): replay equals eager bit for bit; guards retrace, fall back and explain.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "codegen/cuda/nvrtc.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tests/util/train_step.h"

namespace stepjit {
namespace {

std::vector<float> Values(const Tensor& t) { return t.contiguous().to(DType::kF32).to_vector<float>(); }

using test::Batch;

std::vector<Batch> MakeBatches(int n, int64_t batch, uint64_t seed) {
  return test::RandomBatches(n, seed, /*rows=*/batch, /*features=*/20,
                             /*classes=*/5);
}

nn::Sequential MakeModel() {
  manual_seed(7);
  return nn::Sequential(nn::Linear(20, 32), nn::ReLU(), nn::Linear(32, 32), nn::ReLU(),
                        nn::Linear(32, 5));
}

// Runs `steps` steps with the given optimizer kind, compiled or eager, and
// returns losses, parameters and optimizer state flattened.
template <typename Opt, typename Options>
std::vector<std::vector<float>> Train(bool compiled, Options opt_options, int steps,
                                      std::string* ir = nullptr, CompileStats* stats = nullptr) {
  nn::Sequential model = MakeModel();
  Opt opt(model.parameters(), opt_options);
  auto step = test::CrossEntropyStep(model, opt);
  auto fast = compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager});
  std::vector<std::vector<float>> out;
  for (const Batch& b : MakeBatches(steps, 16, 3)) out.push_back(Values(fast(b.x, b.y)));
  for (const Tensor& p : model.parameters()) {
    out.push_back(Values(p));
    out.push_back(Values(p.grad()));
  }
  if (ir) {
    std::ostringstream os;
    fast.dump_ir(os);
    *ir = os.str();
  }
  if (stats) *stats = fast.stats();
  return out;
}

TEST(CompileTest, AdamWReplayIsBitIdenticalToEager) {
  std::string ir;
  CompileStats stats;
  auto eager = Train<optim::AdamW>(false, optim::AdamWOptions{.lr = 1e-2}, 50);
  auto compiled = Train<optim::AdamW>(true, optim::AdamWOptions{.lr = 1e-2}, 50, &ir, &stats);
  ASSERT_EQ(eager.size(), compiled.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_EQ(eager[i], compiled[i]) << "entry " << i;
  EXPECT_EQ(stats.replays, 48);  // 1 warmup, 1 trace
  EXPECT_EQ(stats.traces, 1);
  EXPECT_GT(stats.ops_per_step, 50);
  EXPECT_NE(ir.find("graph @train_step("), std::string::npos) << ir;
  EXPECT_NE(ir.find("assign %s"), std::string::npos) << ir;
  EXPECT_NE(ir.find("cross_entropy"), std::string::npos);
  EXPECT_NE(ir.find("addcmul_"), std::string::npos);
}

TEST(CompileTest, SgdMomentumReplayIsBitIdenticalToEager) {
  optim::SGDOptions o{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true};
  auto eager = Train<optim::SGD>(false, o, 50);
  auto compiled = Train<optim::SGD>(true, o, 50);
  ASSERT_EQ(eager.size(), compiled.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_EQ(eager[i], compiled[i]) << "entry " << i;
}

struct Fixture {
  nn::Sequential model = MakeModel();
  optim::SGD opt{model.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9}};
  std::function<Tensor(const Tensor&, const Tensor&)> step = [this](const Tensor& x,
                                                                    const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
};

TEST(CompileTest, NewBatchSizeIsANewShapeAndStaysCorrect) {
  Fixture a, b;
  auto fast = compile(a.step);
  for (int64_t batch : {16, 16, 16, 8, 8, 16}) {
    Batch in = MakeBatches(1, batch, batch)[0];
    EXPECT_EQ(Values(fast(in.x, in.y)), Values(b.step(in.x, in.y))) << "batch " << batch;
  }
  for (size_t i = 0; i < a.model.parameters().size(); ++i) {
    EXPECT_EQ(Values(a.model.parameters()[i]), Values(b.model.parameters()[i]));
  }
  CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 1);
  EXPECT_EQ(s.shape_builds, 1);
  EXPECT_EQ(s.specializations, 2);
  EXPECT_EQ(s.replays, 4);
  EXPECT_NE(fast.explain().find(
                "a concrete shape of specialization 0 compiled for (x0: "
                "f32[8, 20], x1: i64[8])"),
            std::string::npos)
      << fast.explain();
}

TEST(CompileTest, NewBatchSizeRetracesWithStaticShapes) {
  Fixture a, b;
  auto fast = compile(a.step, {.shapes = Shapes::kStatic});
  for (int64_t batch : {16, 16, 16, 8, 8, 16}) {
    Batch in = MakeBatches(1, batch, batch)[0];
    EXPECT_EQ(Values(fast(in.x, in.y)), Values(b.step(in.x, in.y)))
        << "batch " << batch;
  }
  for (size_t i = 0; i < a.model.parameters().size(); ++i) {
    EXPECT_EQ(Values(a.model.parameters()[i]), Values(b.model.parameters()[i]));
  }
  CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 2);
  EXPECT_EQ(s.specializations, 2);
  EXPECT_EQ(s.replays, 3);
  EXPECT_NE(fast.explain().find("argument x0 is f32[8, 20], traced as f32[16, 20]"),
            std::string::npos)
      << fast.explain();
}

TEST(CompileTest, NewDtypeRetraces) {
  manual_seed(1);
  Tensor w = randn({4}, {.dtype = DType::kF64});
  auto fast = compile([&](const Tensor& x) { return sum(x * x); }, {.warmup_steps = 0});
  Tensor x32 = randn({4}), x64 = x32.to(DType::kF64);
  EXPECT_EQ(fast(x32).dtype(), DType::kF32);
  EXPECT_EQ(fast(x32).dtype(), DType::kF32);
  EXPECT_EQ(fast(x64).dtype(), DType::kF64);
  EXPECT_DOUBLE_EQ(fast(x64).item(), sum(x64 * x64).item());
  EXPECT_EQ(fast.stats().traces, 2);
  EXPECT_NE(fast.explain().find("argument x0 is f64[4], traced as f32[4]"), std::string::npos)
      << fast.explain();
}

TEST(CompileTest, PastTheTraceLimitRunsEagerlyAndExplains) {
  auto fast =
      compile([](const Tensor& x) { return x * 2.0; },
              {.warmup_steps = 0, .max_traces = 2, .shapes = Shapes::kStatic});
  for (int64_t n : {1, 2, 3, 3}) {
    Tensor x = arange(0, static_cast<double>(n), 1, {.dtype = DType::kF32});
    EXPECT_EQ(Values(fast(x)), Values(x * 2.0));
  }
  CompileStats s = fast.stats();
  EXPECT_EQ(s.specializations, 2);
  EXPECT_EQ(s.fallbacks, 2);
  EXPECT_NE(fast.explain().find("2 specializations already made (max_traces)"),
            std::string::npos)
      << fast.explain();
}

TEST(CompileTest, ReplacedParameterIsCaughtByTheIdentityGuard) {
  Fixture a;
  auto fast = compile(a.step);
  Batch in = MakeBatches(1, 8, 1)[0];
  fast(in.x, in.y);
  fast(in.x, in.y);
  fast(in.x, in.y);  // replayed
  std::shared_ptr<nn::LinearImpl> first = a.model.at<nn::LinearImpl>(0);
  Tensor fresh = zeros({32, 20});
  first->replace_parameter("weight", fresh);
  fast(in.x, in.y);  // eager: the forward now reads `fresh`, whose .grad is new
  fast(in.x, in.y);  // retraced
  fast(in.x, in.y);  // replayed
  EXPECT_EQ(fast.stats().traces, 2);
  EXPECT_TRUE(fresh.grad().defined());
  EXPECT_NE(fast.explain().find("parameter was replaced"), std::string::npos) << fast.explain();
}

// Replacing a parameter of another model leaves the step alone: the guard is
// the replaced tensor's own, not a count of replacements in the process.
TEST(CompileTest, ReplacingAParameterOfAnotherModelKeepsTheStepReplaying) {
  Fixture a, b, twin;
  auto fast = compile(a.step);
  const std::vector<Batch> batches = MakeBatches(6, 8, 1);
  for (int i = 0; i < 6; ++i) {
    if (i == 3)
      b.model.at<nn::LinearImpl>(0)->replace_parameter("weight",
                                                       zeros({32, 20}));
    Tensor got = fast(batches[i].x, batches[i].y);
    Tensor want = twin.step(batches[i].x, batches[i].y);
    EXPECT_EQ(got.item(), want.item()) << "call " << i;
  }
  EXPECT_EQ(fast.stats().traces, 1) << fast.explain();
  EXPECT_EQ(fast.stats().replays, 4) << fast.explain();
}

TEST(CompileTest, SetLrBetweenCompiledStepsTakesEffect) {
  Fixture a, b;
  auto fast = compile(a.step);
  for (int i = 0; i < 6; ++i) {
    if (i == 4) {
      a.opt.set_lr(0.01);
      b.opt.set_lr(0.01);
    }
    Batch in = MakeBatches(1, 8, 10 + i)[0];
    EXPECT_EQ(Values(fast(in.x, in.y)), Values(b.step(in.x, in.y))) << "step " << i;
  }
  EXPECT_EQ(fast.stats().traces, 1);
  for (size_t i = 0; i < a.model.parameters().size(); ++i) {
    EXPECT_EQ(Values(a.model.parameters()[i]), Values(b.model.parameters()[i]));
  }
}

TEST(CompileTest, ItemInsideTheStepIsAGraphBreak) {
  Fixture a, b;
  double seen = 0;
  auto with_item = [&](Fixture& f) {
    return [&](const Tensor& x, const Tensor& y) {
      Tensor loss = f.step(x, y);
      seen = loss.item();
      return loss;
    };
  };
  auto eager = with_item(b);
  std::string explain;
  ::testing::internal::CaptureStderr();
  {
    auto fast = compile(with_item(a), {.name = "item_step"});
    for (int i = 0; i < 12; ++i) {
      Batch in = MakeBatches(1, 8, 20 + i)[0];
      EXPECT_EQ(Values(fast(in.x, in.y)), Values(eager(in.x, in.y)));
    }
    EXPECT_EQ(fast.stats().replays, 0);
    explain = fast.explain();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(explain.find("graph break: item() reads f32[]"), std::string::npos)
      << explain;
  // Said on stderr once, not once per call, then counted when the step goes.
  const std::string warning =
      "stepjit[item_step]: warning: marked eager-only: ";
  ASSERT_NE(err.find(warning), std::string::npos) << err;
  EXPECT_EQ(err.find(warning, err.find(warning) + 1), std::string::npos) << err;
  EXPECT_NE(err.find("item() reads f32[]"), std::string::npos) << err;
  EXPECT_NE(
      err.find("stepjit[item_step]: 10 of 12 calls ran eagerly after tracing "
               "(eager-only: 1); explain() says why"),
      std::string::npos)
      << err;
}

TEST(CompileTest, EagerModeNeverTraces) {
  Fixture a;
  auto fast = compile(a.step, {.mode = Mode::kEager});
  Batch in = MakeBatches(1, 8, 1)[0];
  for (int i = 0; i < 3; ++i) fast(in.x, in.y);
  EXPECT_EQ(fast.stats().traces, 0);
  EXPECT_EQ(fast.stats().eager_calls, 3);
}

TEST(CompileTest, GradBindingsMatchEagerAfterReplay) {
  Fixture a;
  auto fast = compile(a.step);
  Batch in = MakeBatches(1, 8, 1)[0];
  for (int i = 0; i < 3; ++i) fast(in.x, in.y);
  for (const Tensor& p : a.model.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().shape(), p.shape());
  }
  // A tensor returned by the step is fresh on every replay, like eager.
  Tensor l1 = fast(in.x, in.y), l2 = fast(in.x, in.y);
  EXPECT_NE(l1.storage(), l2.storage());
}

TEST(CompileTest, TupleResults) {
  auto fast = compile([](const Tensor& x) { return std::make_tuple(x + 1.0, x * 3.0); },
                      {.warmup_steps = 0});
  Tensor x = from_vector(std::vector<float>{1, 2}, {2});
  for (int i = 0; i < 3; ++i) {
    auto [a, b] = fast(x);
    EXPECT_EQ(Values(a), (std::vector<float>{2, 3}));
    EXPECT_EQ(Values(b), (std::vector<float>{3, 6}));
  }
  EXPECT_EQ(fast.stats().replays, 2);
}

TEST(CompileTest, AccumulatingGradsInPlaceMatchesEager) {
  // zero_grad(set_to_none = false) keeps each .grad tensor and zeroes it, so
  // the replay must write into the same tensors the eager step would.
  auto run = [](bool compiled) {
    manual_seed(3);
    nn::Linear lin(6, 4);
    nn::Linear unused(2, 2);  // its grad stays unset
    std::vector<Tensor> params = lin.parameters();
    params.push_back(unused->weight);
    optim::AdamW opt(params, {.lr = 0.01});
    auto step = [&](const Tensor& x) {
      opt.zero_grad(/*set_to_none=*/false);
      Tensor loss = sum(lin(x) * lin(x));
      loss.backward();
      opt.step();
      return loss;
    };
    auto fast = compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager});
    Generator gen(5);
    Tensor g0;
    std::vector<std::vector<float>> out;
    for (int i = 0; i < 5; ++i) {
      out.push_back(Values(fast(randn({3, 6}, {}, &gen))));
      if (i == 0) g0 = lin->weight.grad();
      EXPECT_TRUE(lin->weight.grad().is_same(g0)) << "the .grad tensor keeps its identity";
      EXPECT_FALSE(unused->weight.grad().defined());
    }
    out.push_back(Values(lin->weight));
    out.push_back(Values(lin->weight.grad()));
    return out;
  };
  EXPECT_EQ(run(false), run(true));
}

TEST(CompileTest, ReadingAViewAfterAnInPlaceWriteIsAGraphBreak) {
  Tensor state = zeros({4});
  auto step = [&](const Tensor& x) {
    Tensor view = state.slice(0, 0, 2);
    state.add_(x);             // writes the storage `view` aliases
    return view * 2.0;         // eager sees the new values through the view
  };
  Tensor eager_state = zeros({4});
  auto eager = [&](const Tensor& x) {
    Tensor view = eager_state.slice(0, 0, 2);
    eager_state.add_(x);
    return view * 2.0;
  };
  auto fast = compile(step, {.warmup_steps = 0});
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Values(fast(x)), Values(eager(x)));
  EXPECT_EQ(Values(state), Values(eager_state));
  EXPECT_EQ(fast.stats().replays, 0);
  EXPECT_NE(fast.explain().find("read after an in-place op wrote its storage"),
            std::string::npos)
      << fast.explain();
}

// The example's step (MLP 784-512-512-10, batch 128) with AdamW or SGD.
struct MlpStep {
  nn::Sequential model;
  std::unique_ptr<optim::Optimizer> opt;
  explicit MlpStep(bool adamw) {
    manual_seed(11);
    model = nn::Sequential(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 512), nn::ReLU(),
                           nn::Linear(512, 10));
    if (adamw) {
      opt = std::make_unique<optim::AdamW>(model.parameters(), optim::AdamWOptions{.lr = 1e-3});
    } else {
      opt = std::make_unique<optim::SGD>(model.parameters(),
                                         optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
    }
  }
  Tensor operator()(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    opt->step();
    return loss;
  }
};

TEST(CompileTest, FullPipelineCutsKernelsAndMatchesEagerOnTheExampleStep) {
  for (bool adamw : {true, false}) {
    MlpStep eager_step(adamw), compiled_step(adamw);
    auto fast = compile([&](const Tensor& x, const Tensor& y) { return compiled_step(x, y); });
    Generator gen(2);
    for (int i = 0; i < 50; ++i) {
      Tensor x = randn({128, 784}, {}, &gen);
      Tensor y = randint(0, 10, {128}, {.dtype = DType::kI64}, &gen);
      // The interpreter runs the same kernels in the same order per value:
      // fusion and memory planning change neither, so results are equal bit
      // for bit (tighter than the 1e-6 relative bound fusion is allowed).
      ASSERT_EQ(Values(fast(x, y)), Values(eager_step(x, y))) << "step " << i;
    }
    for (size_t i = 0; i < eager_step.model.parameters().size(); ++i) {
      EXPECT_EQ(Values(compiled_step.model.parameters()[i]),
                Values(eager_step.model.parameters()[i]));
    }
    CompileStats s = fast.stats();
    EXPECT_EQ(s.replays, 48);
    // The per-parameter optimizer regions are elementwise: generated code.
    EXPECT_GT(s.native_regions, 0);
    EXPECT_LE(s.kernels_per_step * 2, s.ops_per_step)
        << (adamw ? "AdamW" : "SGD") << ": " << s.ops_per_step << " ops, " << s.kernels_per_step
        << " kernels";
    // The compile time in parts (STEPJIT_LOG=compile): each part ran, and
    // together they are no more than the whole.
    EXPECT_GT(s.trace_ms, 0);
    EXPECT_GT(s.passes_ms, 0);
    EXPECT_GT(s.codegen_wall_ms, 0);
    EXPECT_LE(s.trace_ms + s.passes_ms + s.codegen_wall_ms, s.compile_ms);
    // (codegen_wall_ms against codegen_ms, the sum over regions compiled
    // side by side, is a timing relation that preemption on a loaded
    // machine breaks: not asserted.)
    EXPECT_GT(s.codegen_ms, 0);
    std::cout << (adamw ? "AdamW" : "SGD") << ": eager ops/step " << s.ops_per_step
              << ", compiled kernels/step " << s.kernels_per_step << "\n";
  }
}

TEST(CompileTest, CompiledPeakMemoryDoesNotExceedEager) {
  MlpStep eager_step(true), compiled_step(true);
  auto fast = compile([&](const Tensor& x, const Tensor& y) { return compiled_step(x, y); });
  Generator gen(4);
  Tensor x = randn({128, 784}, {}, &gen);
  Tensor y = randint(0, 10, {128}, {.dtype = DType::kI64}, &gen);
  for (int i = 0; i < 3; ++i) {
    fast(x, y);
    eager_step(x, y);
  }
  auto peak_of = [&](auto&& fn) {
    const int64_t base = GetCpuMemoryStats().allocated_bytes;
    ResetCpuPeakMemory();
    fn();
    return GetCpuMemoryStats().peak_bytes - base;
  };
  const int64_t eager_peak = peak_of([&] { eager_step(x, y); });
  const int64_t compiled_peak = peak_of([&] { fast(x, y); });
  const int64_t planned = fast.stats().planned_peak_bytes;
  std::cout << "peak bytes above steady state: eager " << eager_peak << ", compiled "
            << compiled_peak << ", planned " << planned << "\n";
  EXPECT_GT(planned, 0);
  EXPECT_LE(planned, eager_peak);
  EXPECT_LE(compiled_peak, eager_peak);
}

TEST(CompileTest, DumpedIrOfTheExampleStepRoundTrips) {
  MlpStep step(true);
  auto fast = compile([&](const Tensor& x, const Tensor& y) { return step(x, y); });
  Generator gen(8);
  Tensor x = randn({128, 784}, {}, &gen);
  Tensor y = randint(0, 10, {128}, {.dtype = DType::kI64}, &gen);
  for (int i = 0; i < 3; ++i) fast(x, y);
  std::ostringstream os;
  fast.dump_ir(os);
  auto parsed = ir::ParseGraph(os.str(), "dump.ir");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(ir::Verify(**parsed).ok());
  EXPECT_EQ(ir::Print(**parsed), os.str());
  EXPECT_NE(os.str().find("fusion @fused_"), std::string::npos);
}

TEST(CompileTest, DumpWritesTraceEveryPassAndKernelIr) {
  const std::string root = "/tmp/stepjit_dump_test";
  std::filesystem::remove_all(root);
  setenv("STEPJIT_DUMP", root.c_str(), 1);
  setenv("STEPJIT_DUMP_CUDA", "ptx:sm_80", 1);
  MlpStep step(true);
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return step(x, y); },
              {.name = "dump_mlp"});
  // Each compiled function dumps into a folder of its own name.
  const std::string dir = root + "/dump_mlp";
  Generator gen(9);
  Tensor x = randn({16, 784}, {}, &gen);
  Tensor y = randint(0, 10, {16}, {.dtype = DType::kI64}, &gen);
  for (int i = 0; i < 3; ++i) fast(x, y);
  unsetenv("STEPJIT_DUMP");
  unsetenv("STEPJIT_DUMP_CUDA");
  for (const char* f : {"000-trace.ir", "004-fuse.ir", "008-memory-plan.ir"}) {
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / f)) << f;
  }
  int raw = 0, opt = 0, cu = 0, ptx = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".opt.ll")) ++opt;
    else if (name.ends_with(".ll")) ++raw;
    else if (name.ends_with(".cu")) ++cu;
    else if (name.ends_with(".ptx")) ++ptx;
  }
  EXPECT_EQ(raw, fast.stats().native_regions);
  EXPECT_EQ(opt, fast.stats().native_regions);
  EXPECT_GT(opt, 0);
  // STEPJIT_DUMP_CUDA: the CUDA backend lowers the same regions as the CPU one.
  EXPECT_EQ(cu, fast.stats().native_regions);
  if (codegen::cuda::NvrtcAvailable()) {
    EXPECT_EQ(ptx, cu);
  }
  std::filesystem::remove_all(root);
}

// A step may return its tensors as a std::pair or a std::vector (of a
// length that may change from call to call), compiled as eagerly.
TEST(CompileTest, StepsReturnPairsAndVectorsOfTensors) {
  Generator gen(12);
  const Tensor w = randn({5, 3}, {}, &gen);
  auto pair_step = [&](const Tensor& x) {
    const Tensor y = matmul(x, w);
    return std::make_pair(sum(y), relu(y));
  };
  auto vec_step = [&](const Tensor& x, const Tensor& k) {
    std::vector<Tensor> out = {x * 2.0};
    // The host decides how many results: a different count is a new step.
    for (int64_t i = 0; i < k.size(0); ++i)
      out.push_back(x + static_cast<double>(i));
    return out;
  };
  auto fast_pair = compile(pair_step);
  auto fast_vec = compile(vec_step);
  for (int call = 0; call < 6; ++call) {
    const Tensor x = randn({4, 5}, {}, &gen);
    const auto [s, r] = fast_pair(x);
    const auto [es, er] = pair_step(x);
    EXPECT_EQ(s.to_vector<float>(), es.to_vector<float>()) << call;
    EXPECT_EQ(r.to_vector<float>(), er.to_vector<float>()) << call;
    const Tensor k = zeros({1 + call % 3});
    const std::vector<Tensor> got = fast_vec(x, k), want = vec_step(x, k);
    ASSERT_EQ(got.size(), want.size()) << call;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i].to_vector<float>(), want[i].to_vector<float>()) << call;
  }
  EXPECT_GT(fast_pair.stats().replays, 0) << fast_pair.explain();
  EXPECT_GT(fast_vec.stats().replays, 0) << fast_vec.explain();
}

// A train and an eval step compiled in one process keep their own dumps,
// and so do two functions of the same name (the second gets "-2"); a later
// trace of a function dumps into trace<k> under its folder.
TEST(CompileTest, EachCompiledFunctionDumpsIntoItsOwnFolder) {
  const std::filesystem::path root =
      std::filesystem::path(::testing::TempDir()) / "stepjit_dump_functions";
  std::filesystem::remove_all(root);
  setenv("STEPJIT_DUMP", root.c_str(), 1);
  auto train = compile([](const Tensor& x) { return x * 2.0 + 1.0; },
                       {.name = "fn_train"});
  auto eval =
      compile([](const Tensor& x) { return relu(x); }, {.name = "fn_eval"});
  auto again =
      compile([](const Tensor& x) { return x - 3.0; }, {.name = "fn_train"});
  for (int i = 0; i < 3; ++i) {
    train(ones({4}));
    eval(ones({4}));
    again(ones({4}));
  }
  train(ones({7, 3}));  // a new rank: a second trace of fn_train
  train(ones({7, 3}));
  unsetenv("STEPJIT_DUMP");
  auto trace_of = [&](const std::filesystem::path& dir) {
    std::ifstream in(dir / "000-trace.ir");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  EXPECT_NE(trace_of(root / "fn_train").find("mul"), std::string::npos);
  EXPECT_NE(trace_of(root / "fn_eval").find("relu"), std::string::npos);
  EXPECT_NE(trace_of(root / "fn_train-2").find("sub"), std::string::npos);
  EXPECT_EQ(trace_of(root / "fn_eval").find("mul"), std::string::npos);
  EXPECT_TRUE(
      std::filesystem::exists(root / "fn_train" / "trace1" / "000-trace.ir"))
      << train.explain();
  std::filesystem::remove_all(root);
}

TEST(CompileTest, ReplayedDropoutFollowsManualSeedLikeEager) {
  // Regression: replays took the Philox seed the trace saw, so manual_seed
  // between calls changed the eager step's masks but not the replay's.
  auto run = [](bool compiled) {
    nn::Sequential model = MakeModel();
    optim::SGD opt(model.parameters(), optim::SGDOptions{.lr = 0.1});
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = cross_entropy(dropout(model(x), 0.3), y);
      loss.backward();
      opt.step();
      return loss;
    };
    auto fast = compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager});
    std::vector<std::vector<float>> out;
    int i = 0;
    for (const Batch& b : MakeBatches(6, 16, 4)) {
      manual_seed(500 + i++);
      out.push_back(Values(fast(b.x, b.y)));
    }
    for (const Tensor& p : model.parameters()) out.push_back(Values(p));
    return out;
  };
  const auto eager = run(false), compiled = run(true);
  ASSERT_EQ(eager.size(), compiled.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_EQ(eager[i], compiled[i]) << "entry " << i;
}

}  // namespace
}  // namespace stepjit
