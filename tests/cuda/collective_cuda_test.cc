// dist collectives on CUDA tensors (devices/cuda/kernels/collective_ops.h)
// in a world of one. On the host emulator: the local path (a device copy,
// captured into CUDA graphs), host staging (STEPJIT_DIST_NCCL=off: through
// the dist core's CPU collective, which keeps a compiled step out of CUDA
// graphs with the reason recorded) and the error of
// STEPJIT_DIST_NCCL=force without a device. With a GPU
// (STEPJIT_TEST_CUDA_BACKEND=driver) and NCCL, the same collectives forced
// through NCCL, eagerly and captured in a compiled step's CUDA graph.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "devices/cuda/kernels/collective_ops.h"
#include "devices/cuda/nccl/dist_nccl.h"
#include "devices/cuda/nccl/nccl_library.h"
#include "dist/dist.h"
#include "frontend/stepjit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_backend.h"
#include "tests/util/adamw_mlp.h"
#include "tests/util/scoped_env.h"

namespace stepjit {
namespace {

using runtime::cuda::CollectivePath;
using runtime::cuda::GetCollectiveStats;
using test::Values;
using ::testing::HasSubstr;

const Device kCuda = Device::cuda(0);

using test::ScopedEnv;

class CudaCollectiveTest : public test::CudaTest {
 protected:
  void SetUp() override {
    test::CudaTest::SetUp();
    if (IsSkipped()) return;
    dist::init({.backend = "single"});
  }
};

// The values every collective of a world of one must return, on the host.
const std::vector<float> kValues = {1.5f, -2.25f, 3.0f, 0.125f, -7.5f, 1e-3f};

void ExpectEveryCollectiveReturnsItsInput() {
  const Tensor x = from_vector(kValues, {2, 3}).to(kCuda);
  const std::vector<double> want(kValues.begin(), kValues.end());
  for (dist::ReduceOp op :
       {dist::ReduceOp::kSum, dist::ReduceOp::kAvg, dist::ReduceOp::kMax}) {
    const Tensor r = dist::all_reduce(x, op);
    EXPECT_TRUE(r.device().is_cuda());
    EXPECT_EQ(r.shape(), x.shape());
    EXPECT_EQ(Values(r), want) << dist::ReduceOpName(op);
  }
  const Tensor b = dist::broadcast(x, 0);
  EXPECT_EQ(Values(b), want);
  const Tensor g = dist::all_gather(x);
  EXPECT_EQ(g.shape(), (Shape{2, 3}));  // [world * 2, 3] with a world of one
  EXPECT_EQ(Values(g), want);
  Tensor inplace = x.clone();
  dist::all_reduce_(inplace, dist::ReduceOp::kAvg);
  EXPECT_EQ(Values(inplace), want);
  const dist::Work a = dist::all_reduce_async(x, dist::ReduceOp::kAvg);
  dist::wait_all();
  EXPECT_EQ(Values(a.result()), want);
}

TEST_F(CudaCollectiveTest, WorldOfOneRunsOnTheDevice) {
  if (test::OnRealGpu())
    GTEST_SKIP() << "the emulator's path; the GPU's is ForcedThroughNccl";
  ScopedEnv env("STEPJIT_DIST_NCCL", std::nullopt);
  const auto choice = runtime::cuda::ChooseCollectivePath();
  EXPECT_EQ(choice.path, CollectivePath::kLocal);
  EXPECT_THAT(choice.why_not_nccl, HasSubstr("host emulator"));
  const auto before = GetCollectiveStats();
  ExpectEveryCollectiveReturnsItsInput();
  EXPECT_EQ(GetCollectiveStats().local - before.local, 7);
  EXPECT_EQ(GetCollectiveStats().host_staged, before.host_staged);
}

TEST_F(CudaCollectiveTest, HostStagingThroughTheCpuCollective) {
  ScopedEnv env("STEPJIT_DIST_NCCL", "off");
  EXPECT_EQ(runtime::cuda::ChooseCollectivePath().path,
            CollectivePath::kHostStaging);
  const auto before = GetCollectiveStats();
  ExpectEveryCollectiveReturnsItsInput();
  EXPECT_EQ(GetCollectiveStats().host_staged - before.host_staged, 7);
  EXPECT_EQ(GetCollectiveStats().local, before.local);
}

TEST_F(CudaCollectiveTest, ForcedNcclWithoutADeviceSaysWhy) {
  if (test::OnRealGpu()) GTEST_SKIP() << "checks the emulator";
  ScopedEnv env("STEPJIT_DIST_NCCL", "force");
  const Tensor x = from_vector(kValues, {6}).to(kCuda);
  try {
    dist::all_reduce(x);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::printf("%s\n", e.what());
    EXPECT_THAT(e.what(), HasSubstr("STEPJIT_DIST_NCCL=force"));
    EXPECT_THAT(e.what(), HasSubstr("host emulator"));
  }
}

TEST_F(CudaCollectiveTest, UnknownModeIsRefused) {
  ScopedEnv env("STEPJIT_DIST_NCCL", "sometimes");
  try {
    runtime::cuda::ChooseCollectivePath();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "STEPJIT_DIST_NCCL: expected auto, force, on, 1, off or 0, got "
              "'sometimes'");
  }
}

// A data-parallel step: gradients averaged over the world before the
// optimizer step. In a world of one the average is the gradient, so the
// compiled step must match a plain step on the CPU.
struct DdpRun : test::AdamWMlp {
  bool reduce = true;

  DdpRun(Device device, bool with_reduce)
      : AdamWMlp({12, 16, 4}, 7, device), reduce(with_reduce) {}
  Tensor Step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    if (reduce) {
      for (Tensor& p : model.parameters()) {
        Tensor g = p.grad();
        dist::all_reduce_(g, dist::ReduceOp::kAvg);
      }
    }
    opt->step();
    return loss;
  }
};

// Trains 6 steps compiled on CUDA and plainly on the CPU; returns explain().
std::string CompiledDdpMatchesCpu() {
  DdpRun compiled(kCuda, true), cpu(Device::cpu(), false);
  auto fast = compile(
      [&](const Tensor& x, const Tensor& y) { return compiled.Step(x, y); });
  Generator g(3);
  for (int i = 0; i < 6; ++i) {
    const Tensor x = randn({8, 12}, {}, &g),
                 y = randint(0, 4, {8}, {.dtype = DType::kI64}, &g);
    const double lc = fast(x.to(kCuda), y.to(kCuda)).item();
    const double lcpu = cpu.Step(x, y).item();
    // Fused regions sum in another order than the CPU's eager ops: 1e-5
    // relative per step.
    EXPECT_NEAR(lc, lcpu, 1e-5 * std::abs(lcpu) + 1e-6) << "step " << i;
  }
  auto pc = compiled.model.parameters(), pcpu = cpu.model.parameters();
  for (size_t i = 0; i < pc.size(); ++i) {
    const std::vector<double> a = Values(pc[i]), b = Values(pcpu[i]);
    for (size_t j = 0; j < a.size(); ++j) {
      EXPECT_NEAR(a[j], b[j], 1e-4 * std::abs(b[j]) + 1e-5)
          << "parameter " << i << "[" << j << "]";
    }
  }
  EXPECT_EQ(fast.stats().replays, 4);  // 1 warmup, 1 trace
  return fast.explain();
}

TEST_F(CudaCollectiveTest, CompiledStepWithAllReduceReplaysAsACudaGraph) {
  if (test::OnRealGpu())
    GTEST_SKIP() << "the emulator's path; the GPU's is ForcedThroughNccl";
  ScopedEnv env("STEPJIT_DIST_NCCL", std::nullopt);
  const auto before = GetCollectiveStats();
  const std::string explain = CompiledDdpMatchesCpu();
  EXPECT_THAT(explain,
              HasSubstr("replayed as a CUDA graph (3 graph launches, "));
  // Four parameters: the warmup and trace calls, and the uncaptured and
  // captured runs, each reduce four gradients on the device; graph
  // launches replay the captured copies without dispatching again.
  EXPECT_EQ(GetCollectiveStats().local - before.local, 4 * 4);
}

TEST_F(CudaCollectiveTest, CompiledStepWithHostStagingIsNotCaptured) {
  ScopedEnv env("STEPJIT_DIST_NCCL", "off");
  const auto before = GetCollectiveStats();
  const std::string explain = CompiledDdpMatchesCpu();
  std::printf("%s\n", explain.c_str());
  EXPECT_THAT(
      explain,
      HasSubstr("no CUDA graph: all_reduce on CUDA tensors copies through the "
                "host (STEPJIT_DIST_NCCL=off)"));
  // Every call reduces the four gradients through the host.
  EXPECT_EQ(GetCollectiveStats().host_staged - before.host_staged, 6 * 4);
}

// ---- With a GPU and NCCL ----------------------------------------------------

class CudaCollectiveNcclTest : public CudaCollectiveTest {
 protected:
  void SetUp() override {
    CudaCollectiveTest::SetUp();
    if (IsSkipped()) return;
    if (!test::OnRealGpu())
      GTEST_SKIP() << "needs STEPJIT_TEST_CUDA_BACKEND=driver and a GPU";
    absl::StatusOr<const runtime::cuda::NcclLibrary*> lib =
        runtime::cuda::LoadNccl();
    if (!lib.ok()) GTEST_SKIP() << lib.status();
  }
};

TEST_F(CudaCollectiveNcclTest, ForcedThroughNccl) {
  ScopedEnv env("STEPJIT_DIST_NCCL", "force");
  EXPECT_EQ(runtime::cuda::ChooseCollectivePath().path, CollectivePath::kNccl);
  const auto before = GetCollectiveStats();
  ExpectEveryCollectiveReturnsItsInput();
  EXPECT_EQ(GetCollectiveStats().nccl - before.nccl, 7);
  EXPECT_TRUE(runtime::cuda::DistNcclComm().WaitAll().ok());
}

TEST_F(CudaCollectiveNcclTest, CompiledStepCapturesNcclInACudaGraph) {
  ScopedEnv env("STEPJIT_DIST_NCCL", "force");
  const auto before = GetCollectiveStats();
  const std::string explain = CompiledDdpMatchesCpu();
  EXPECT_THAT(explain,
              HasSubstr("replayed as a CUDA graph (3 graph launches, "));
  EXPECT_EQ(GetCollectiveStats().nccl - before.nccl, 4 * 4);
  EXPECT_TRUE(runtime::cuda::DistNcclComm().WaitAll().ok());
}

}  // namespace
}  // namespace stepjit
