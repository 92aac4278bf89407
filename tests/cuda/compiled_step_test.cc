// compile(step) on CUDA tensors: fusion regions become generated CUDA kernels,
// the replay runs on the program's stream and, from the third call, as one
// captured CUDA graph. Every replay is checked against the same step run
// eagerly on CUDA (and that against the CPU). Runs on the host emulator
// unless STEPJIT_TEST_CUDA_BACKEND=driver.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cuda/ops.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "testing/cuda_emulator/emulator_backend.h"
#include "tests/cuda/cuda_test_backend.h"
#include "tests/util/adamw_mlp.h"
#include "tests/util/train_step.h"

namespace stepjit {
namespace {

using test::CudaTest;
using test::Values;

const Device kCuda = Device::cuda(0);

struct StepRun : test::AdamWMlp {
  bool dropout = false;

  StepRun(Device device, bool with_dropout)
      : AdamWMlp({20, 32, 6}, 11, device), dropout(with_dropout) {}
  Tensor Step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor h = model(x);
    if (dropout) h = stepjit::dropout(h, 0.2);
    Tensor loss = cross_entropy(h, y);
    loss.backward();
    opt->step();
    return loss;
  }
};

using test::Batch;
std::vector<Batch> Batches(int n) {
  return test::RandomBatches(n, /*seed=*/5, /*rows=*/16, /*features=*/20,
                             /*classes=*/6);
}

// Trains `steps` steps compiled (with or without CUDA graphs) and eagerly on
// CUDA from the same initialization; expects equal losses and parameters.
void ExpectCompiledMatchesEager(bool cuda_graphs, int steps, CompileStats* stats,
                                std::string* explain) {
  StepRun eager(kCuda, false), compiled(kCuda, false), cpu(Device::cpu(), false);
  auto fast = compile([&](const Tensor& x, const Tensor& y) { return compiled.Step(x, y); },
                      {.cuda_graphs = cuda_graphs});
  const auto batches = Batches(steps);
  for (int i = 0; i < steps; ++i) {
    const Tensor x = batches[i].x.to(kCuda), y = batches[i].y.to(kCuda);
    const double le = eager.Step(x, y).item();
    const double lc = fast(x, y).item();
    const double lcpu = cpu.Step(batches[i].x, batches[i].y).item();
    // Fused regions sum bias gradients in another order than eager ops:
    // 1e-5 relative per step.
    EXPECT_NEAR(lc, le, 1e-5 * std::abs(le) + 1e-6) << "step " << i;
    EXPECT_NEAR(le, lcpu, 1e-5 * std::abs(lcpu) + 1e-6) << "step " << i;
  }
  auto pe = eager.model.parameters(), pc = compiled.model.parameters();
  for (size_t i = 0; i < pe.size(); ++i) {
    ASSERT_TRUE(pc[i].device().is_cuda());
    const std::vector<double> a = Values(pc[i]), b = Values(pe[i]);
    for (size_t j = 0; j < a.size(); ++j) {
      EXPECT_NEAR(a[j], b[j], 1e-4 * std::abs(b[j]) + 1e-5) << "parameter " << i << "[" << j << "]";
    }
  }
  *stats = fast.stats();
  *explain = fast.explain();
}

TEST_F(CudaTest, CompiledStepReplaysAsACudaGraphAndMatchesEager) {
  runtime::cuda::Backend* b = runtime::cuda::GetBackend();
  const bool emulated = runtime::cuda::IsEmulatorBackend(*b);
  const int64_t graphs_before = emulated ? runtime::cuda::GetEmulatorStats(*b).graph_launches : 0;
  CompileStats stats;
  std::string explain;
  ExpectCompiledMatchesEager(/*cuda_graphs=*/true, 8, &stats, &explain);
  EXPECT_EQ(stats.replays, 6);  // 1 warmup, 1 trace
  EXPECT_GT(stats.native_regions, 3) << explain;
  // Replays 2..6 launch the graph captured at replay 2.
  EXPECT_NE(explain.find("replayed as a CUDA graph (5 graph launches, "),
            std::string::npos)
      << explain;
  if (emulated) {
    ASSERT_TRUE(b->SynchronizeDevice().ok());
    EXPECT_EQ(runtime::cuda::GetEmulatorStats(*b).graph_launches - graphs_before, 5);
  }
}

TEST_F(CudaTest, CompiledStepWithoutGraphsMatchesEager) {
  CompileStats stats;
  std::string explain;
  ExpectCompiledMatchesEager(/*cuda_graphs=*/false, 5, &stats, &explain);
  EXPECT_NE(explain.find("no CUDA graph: turned off"), std::string::npos) << explain;
}

TEST_F(CudaTest, DropoutStepsReplayAsACudaGraphDrawingFreshMasks) {
  // The graph's dropout kernels read the graph's random state, a captured
  // input that each replay copies afresh like any other: each replay draws
  // the masks the eager step draws, also after manual_seed.
  StepRun eager(kCuda, true), compiled(kCuda, true);
  auto fast = compile([&](const Tensor& x, const Tensor& y) { return compiled.Step(x, y); });
  const auto batches = Batches(7);
  for (int i = 0; i < 7; ++i) {
    const Tensor x = batches[i].x.to(kCuda), y = batches[i].y.to(kCuda);
    if (i % 3 == 0) manual_seed(100 + i);
    const uint64_t before = default_generator().offset();
    const double le = eager.Step(x, y).item();
    const uint64_t drawn = default_generator().offset() - before;
    default_generator().set_offset(before);
    const double lc = fast(x, y).item();
    EXPECT_EQ(default_generator().offset() - before, drawn) << "step " << i;
    EXPECT_NEAR(lc, le, 1e-5 * std::abs(le) + 1e-6) << "step " << i;
  }
  auto pe = eager.model.parameters(), pc = compiled.model.parameters();
  for (size_t i = 0; i < pe.size(); ++i) {
    const std::vector<double> a = Values(pc[i]), b = Values(pe[i]);
    for (size_t j = 0; j < a.size(); ++j) {
      EXPECT_NEAR(a[j], b[j], 1e-4 * std::abs(b[j]) + 1e-5) << "parameter " << i << "[" << j << "]";
    }
  }
  const std::string explain = fast.explain();
  EXPECT_NE(explain.find("replayed as a CUDA graph (4 graph launches, "),
            std::string::npos)
      << explain;
}

TEST_F(CudaTest, AHostRoundTripKeepsTheStepOutOfCudaGraphsAndSaysWhy) {
  StepRun eager(kCuda, false), compiled(kCuda, false);
  // Argmax of an integer tensor has no CUDA kernel (the cast to i64 has
  // one): it makes a host round trip, which capture refuses; the step
  // then replays without a graph.
  auto step = [](StepRun& r, const Tensor& x, const Tensor& y) {
    r.opt->zero_grad();
    Tensor h = r.model(x);
    h = h + cast(argmax(cast(h, DType::kI64), 1), DType::kF32).unsqueeze(1) * 0.5;
    Tensor loss = cross_entropy(h, y);
    loss.backward();
    r.opt->step();
    return loss;
  };
  auto fast = compile([&](const Tensor& x, const Tensor& y) { return step(compiled, x, y); });
  const auto batches = Batches(5);
  for (int i = 0; i < 5; ++i) {
    const Tensor x = batches[i].x.to(kCuda), y = batches[i].y.to(kCuda);
    manual_seed(7 + i);
    const double le = step(eager, x, y).item();
    manual_seed(7 + i);
    EXPECT_NEAR(fast(x, y).item(), le, 1e-5 * std::abs(le) + 1e-6) << "step " << i;
  }
  const std::string explain = fast.explain();
  EXPECT_NE(explain.find("no CUDA graph: capture failed: "), std::string::npos) << explain;
  EXPECT_NE(explain.find("needs a host round trip, which a CUDA graph cannot capture"),
            std::string::npos)
      << explain;
}

TEST_F(CudaTest, NewInputsAreCopiedIntoTheGraphsBuffers) {
  // The same input tensors refilled in place, and fresh ones: both reach
  // the captured graph.
  StepRun eager(kCuda, false), compiled(kCuda, false);
  auto fast = compile([&](const Tensor& x, const Tensor& y) { return compiled.Step(x, y); });
  const auto batches = Batches(6);
  Tensor x = empty({16, 20}, {.device = kCuda});
  Tensor y = empty({16}, {.dtype = DType::kI64, .device = kCuda});
  for (int i = 0; i < 6; ++i) {
    Tensor xi = x, yi = y;
    if (i % 2 == 0) {
      x.copy_(batches[i].x);
      y.copy_(batches[i].y);
    } else {
      xi = batches[i].x.to(kCuda);
      yi = batches[i].y.to(kCuda);
    }
    const double le = eager.Step(xi, yi).item();
    const double lc = fast(xi, yi).item();
    EXPECT_NEAR(lc, le, 1e-5 * std::abs(le) + 1e-6) << "step " << i;
  }
}

// The bytes a compiled step's CUDA graph copied per launch, from explain().
int64_t CopiedBytesPerLaunch(const std::string& explain) {
  const std::string key = " graph launches, ";
  const size_t at = explain.find(key);
  if (at == std::string::npos) return -1;
  return std::atoll(explain.c_str() + at + key.size());
}

TEST_F(CudaTest, AGraphHandsOutItsGradientsAndLossUncopied) {
  // Gradients and the loss are results in buffers the graph owns: a launch
  // copies only the new inputs in (x f32[16,20], y i64[16]), not the
  // gradients out, as it did before (every non-state result copied: 4x the
  // parameters' bytes plus the loss here).
  StepRun eager(kCuda, false), compiled(kCuda, false);
  auto fast = compile(
      [&](const Tensor& x, const Tensor& y) { return compiled.Step(x, y); });
  const auto batches = Batches(8);
  for (int i = 0; i < 8; ++i) {
    const Tensor x = batches[i].x.to(kCuda), y = batches[i].y.to(kCuda);
    const double le = eager.Step(x, y).item();
    const double lc = fast(x, y).item();
    EXPECT_NEAR(lc, le, 1e-5 * std::abs(le) + 1e-6) << "step " << i;
  }
  const std::string explain = fast.explain();
  int64_t param_bytes = 0;
  for (const Tensor& p : compiled.model.parameters())
    param_bytes += p.numel() * 4;
  ASSERT_EQ(param_bytes, (20 * 32 + 32 + 32 * 6 + 6) * 4);
  EXPECT_EQ(CopiedBytesPerLaunch(explain), 16 * 20 * 4 + 16 * 8) << explain;
  // The .grads are the graph's buffers and hold this step's gradients.
  auto pe = eager.model.parameters(), pc = compiled.model.parameters();
  for (size_t i = 0; i < pe.size(); ++i) {
    const std::vector<double> a = Values(pc[i].grad()),
                              b = Values(pe[i].grad());
    for (size_t j = 0; j < a.size(); ++j)
      EXPECT_NEAR(a[j], b[j], 1e-4 * std::abs(b[j]) + 1e-6)
          << "grad " << i << "[" << j << "]";
  }
}

TEST_F(CudaTest, ResultsHeldAcrossGraphLaunchesKeepTheirValues) {
  // A caller that keeps every step's loss and .grads (and views of them)
  // sees each keep the value of its own step: a launch first passes a held
  // result on to a copy, and only then reuses the graph's buffer.
  StepRun eager(kCuda, false), compiled(kCuda, false);
  auto fast = compile(
      [&](const Tensor& x, const Tensor& y) { return compiled.Step(x, y); });
  const auto batches = Batches(7);
  std::vector<Tensor> losses, grads, views;
  std::vector<double> eager_losses;
  std::vector<std::vector<double>> eager_grads;
  for (int i = 0; i < 7; ++i) {
    const Tensor x = batches[i].x.to(kCuda), y = batches[i].y.to(kCuda);
    eager_losses.push_back(eager.Step(x, y).item());
    eager_grads.push_back(Values(eager.model.parameters()[0].grad()));
    losses.push_back(fast(x, y));
    const Tensor g = compiled.model.parameters()[0].grad();
    grads.push_back(g);
    views.push_back(compiled.model.parameters()[2].grad().view({-1}));
  }
  const std::string explain = fast.explain();
  ASSERT_NE(explain.find("replayed as a CUDA graph (4 graph launches, "),
            std::string::npos)
      << explain;
  // Each launch copied the inputs in; each after the first also passed on
  // the loss, a weight gradient and a view's buffer held from the launch
  // before (the first followed an uncaptured run, whose results are not
  // the graph's).
  const int64_t inputs = 16 * 20 * 4 + 16 * 8,
                held = 4 + 20 * 32 * 4 + 32 * 6 * 4;
  EXPECT_EQ(CopiedBytesPerLaunch(explain), (4 * inputs + 3 * held) / 4)
      << explain;
  for (int i = 0; i < 7; ++i) {
    EXPECT_NEAR(losses[i].item(), eager_losses[i],
                1e-5 * std::abs(eager_losses[i]) + 1e-6)
        << "step " << i;
    const std::vector<double> a = Values(grads[i]);
    for (size_t j = 0; j < a.size(); ++j) {
      EXPECT_NEAR(a[j], eager_grads[i][j],
                  1e-4 * std::abs(eager_grads[i][j]) + 1e-6)
          << "step " << i << " grad[" << j << "]";
    }
    // Distinct steps' views hold distinct values.
    if (i > 0) {
      EXPECT_NE(Values(views[i]), Values(views[i - 1])) << "step " << i;
    }
  }
}

TEST_F(CudaTest, AKernelThatFailsToCompileFallsBackToEagerAndSaysWhy) {
  runtime::cuda::Backend* b = runtime::cuda::GetBackend();
  if (!runtime::cuda::IsEmulatorBackend(*b)) GTEST_SKIP() << "injects failures into the emulator";
  // A backend whose compiler rejects every fusion region's module.
  runtime::cuda::SetBackend(runtime::cuda::MakeEmulatorBackend({.fail_loads_with_prefix = "fused_"}));
  {
    StepRun eager(kCuda, false), compiled(kCuda, false);
    auto fast = compile([&](const Tensor& x, const Tensor& y) { return compiled.Step(x, y); });
    const auto batches = Batches(4);
    for (int i = 0; i < 4; ++i) {
      const Tensor x = batches[i].x.to(kCuda), y = batches[i].y.to(kCuda);
      const double le = eager.Step(x, y).item();
      EXPECT_EQ(fast(x, y).item(), le) << "step " << i;  // both eager: identical
    }
    const std::string explain = fast.explain();
    EXPECT_NE(explain.find("eager-only (building the program failed: fused_"), std::string::npos)
        << explain;
    EXPECT_NE(explain.find("compile error (injected"), std::string::npos) << explain;
    EXPECT_EQ(fast.stats().replays, 0);
  }
  runtime::cuda::SetBackend(runtime::cuda::MakeEmulatorBackend());
}

TEST_F(CudaTest, StepjitDumpWritesTheCudaCOfEveryRegionOfACudaStep) {
  const std::string root =
      "/tmp/stepjit_cuda_dump_test_" + std::to_string(getpid());
  std::filesystem::remove_all(root);
  setenv("STEPJIT_DUMP", root.c_str(), 1);
  StepRun run(kCuda, false);
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return run.Step(x, y); },
              {.name = "cuda_dump_step"});
  const std::string dir = root + "/cuda_dump_step";
  const auto batches = Batches(3);
  for (int i = 0; i < 3; ++i) fast(batches[i].x.to(kCuda), batches[i].y.to(kCuda));
  unsetenv("STEPJIT_DUMP");
  int cu = 0, multi = 0, ll = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".cu")) {
      std::ifstream in(e.path());
      std::stringstream text;
      text << in.rdbuf();
      EXPECT_NE(text.str().find("__global__"), std::string::npos) << name;
      // A multi-region kernel walks its members' virtual blocks.
      if (name.starts_with("multi_")) {
        ++multi;
        EXPECT_NE(text.str().find("for (unsigned sj_b = blockIdx.x;"), std::string::npos) << name;
        EXPECT_NE(text.str().find("__device__ __forceinline__ void"), std::string::npos) << name;
      } else {
        ++cu;
      }
    }
    ll += name.ends_with(".ll") ? 1 : 0;
  }
  EXPECT_EQ(cu, fast.stats().native_regions);
  EXPECT_GE(multi, 1) << fast.explain();
  EXPECT_GT(cu, 0);
  EXPECT_EQ(ll, 0);  // no CPU kernels for a step that runs on CUDA
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / "000-trace.ir"));
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace stepjit
