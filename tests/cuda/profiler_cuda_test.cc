// The trace profiler on CUDA (the host emulator unless
// STEPJIT_TEST_CUDA_BACKEND=driver): kernels are timed with CUDA events on
// their stream's track, also the kernels inside each CUDA graph replay, and
// profiling changes no result.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_backend.h"
#include "tests/util/profiled_mlp.h"
#include "tests/util/trace_check.h"

namespace stepjit {
namespace {

using test::CudaTest;
using test::ParsedTrace;
using test::Span;

const Device kCuda = Device::cuda(0);

using Mlp = test::ProfiledMlp;
constexpr double kStepGemmFlops = test::kProfiledMlpStepGemmFlops;

TEST_F(CudaTest, ProfilerTimesTheKernelsOfCudaGraphReplays) {
  setenv("STEPJIT_PEAK_GFLOPS", "100", 1);
  setenv("STEPJIT_PEAK_GBS", "10", 1);
  Mlp eager(kCuda), compiled(kCuda);
  auto step = compile(
      [&](const Tensor& x, const Tensor& y) { return compiled.Step(x, y); });
  Generator g(5);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 10; ++i) {
    xs.push_back(randn({16, 20}, {}, &g).to(kCuda));
    ys.push_back(randint(0, 6, {16}, {.dtype = DType::kI64}, &g).to(kCuda));
  }
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/profile_cuda_", getpid(), ".json");
  std::string summary;
  {
    Profiler profile(path);
    for (int i = 0; i < 8; ++i) {
      const double lc = step(xs[i], ys[i]).item();
      const double le = eager.Step(xs[i], ys[i]).item();
      EXPECT_NEAR(lc, le, 1e-5 * std::abs(le) + 1e-6) << "step " << i;
    }
    profile.Stop();
    summary = profile.Summary();
  }
  // Profiling off again: the program captures a graph without events.
  for (int i = 8; i < 10; ++i) {
    const double lc = step(xs[i], ys[i]).item();
    const double le = eager.Step(xs[i], ys[i]).item();
    EXPECT_NEAR(lc, le, 1e-5 * std::abs(le) + 1e-6) << "step " << i;
  }
  const CompileStats stats = step.stats();
  EXPECT_EQ(stats.replays, 8);
  EXPECT_NE(step.explain().find("replayed as a CUDA graph"), std::string::npos)
      << step.explain();

  const ParsedTrace t = test::ReadTrace(path);
  ASSERT_EQ(t.error, "");
  EXPECT_EQ(test::NestingError(t.spans), "");
  std::vector<const Span*> steps, launches, replays, device_kernels;
  for (const Span& s : t.spans) {
    const bool on_device = t.track_names.at(s.tid).rfind("cuda stream", 0) == 0;
    if (s.name == "train_step (compiled)") steps.push_back(&s);
    if (s.name == "cuda graph launch") launches.push_back(&s);
    if (s.cat == "graph" && on_device) replays.push_back(&s);
    if (s.cat == "kernel" && on_device) device_kernels.push_back(&s);
  }
  ASSERT_EQ(steps.size(), 6u);
  // Replay 1 runs the loop; replays 2..6 launch the graph captured at 2.
  ASSERT_EQ(launches.size(), 5u);
  ASSERT_EQ(replays.size(), 5u);
  for (const Span* l : launches) {
    int in_steps = 0;
    for (const Span* s : steps) in_steps += s->Contains(*l);
    EXPECT_EQ(in_steps, 1) << "a graph launch outside its step";
  }
  // Every kernel of the program, timed on the device, in each graph replay
  // and in the uncaptured replay; the GEMMs with the hand-counted FLOPs.
  int in_replays = 0;
  for (const Span* r : replays) {
    int kernels = 0;
    double flops = 0;
    for (const Span* k : device_kernels) {
      if (!r->Contains(*k)) continue;
      ++kernels;
      EXPECT_TRUE(k->counted) << k->name;
      if (k->name.rfind("matmul ", 0) == 0) flops += k->flops;
    }
    EXPECT_EQ(kernels, stats.kernels_per_step);
    EXPECT_EQ(flops, kStepGemmFlops);
    in_replays += kernels;
  }
  EXPECT_EQ(static_cast<int>(device_kernels.size()) - in_replays,
            stats.kernels_per_step)
      << "the uncaptured first replay";
  // Eager ops were timed on the device too: the compiled step's warmup and
  // traced calls, and the eager twin's 8 steps.
  double eager_gemm_flops = 0;
  std::string gemms;
  for (const Span& s : t.spans) {
    if (s.cat == "op" && s.counted && s.name.rfind("matmul ", 0) == 0 &&
        t.track_names.at(s.tid).rfind("cuda stream", 0) == 0) {
      eager_gemm_flops += s.flops;
      absl::StrAppend(&gemms, s.name, " ", s.flops, " ", s.tid, "; ");
    }
  }
  EXPECT_EQ(eager_gemm_flops, 10 * kStepGemmFlops) << gemms;
  EXPECT_NE(summary.find("@dev"), std::string::npos) << summary;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace stepjit
