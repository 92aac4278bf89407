// The benchmark workloads train the same way in both modes: for every CPU
// workload of stepjit-bench, the compiled step's losses follow the eager
// step's over its first replays, and no fusion region of the compiled step
// runs interpreted. Tolerance: 1e-4 relative + 1e-5 (generated regions
// accumulate reductions in another order than the eager kernels).
#include "bench/workloads.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace stepjit::bench {
namespace {

std::vector<std::string> CpuWorkloadNames() {
  std::vector<std::string> names;
  for (const Workload& w : Workloads()) names.push_back(w.name);
  return names;
}

class WorkloadTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WorkloadTest, CompiledFollowsEagerWithNoRegionInterpreted) {
  const Workload* w = FindWorkload(GetParam());
  ASSERT_NE(w, nullptr);
  WorkloadRun eager(*w, CompileOptions{.mode = Mode::kEager});
  WorkloadRun compiled(*w, CompileOptions{.mode = Mode::kCompiled});
  // The last step of StepsToWarm() is the first replay.
  const int64_t steps = compiled.StepsToWarm() + 2;
  for (int64_t i = 0; i < steps; ++i) {
    const double want = eager.Step().item();
    const double got = compiled.Step().item();
    ASSERT_TRUE(std::isfinite(want)) << "step " << i;
    EXPECT_NEAR(got, want, 1e-4 * std::abs(want) + 1e-5) << "step " << i;
  }
  const CompileStats stats = compiled.stats();
  // A workload whose sizes change every call compiles each new size from
  // its recording and replays it; batch size 1 (mlp784_adamw_bvar's third
  // call) stays specialized and is traced eagerly.
  const int64_t traced_ones = w->sizes.size() > 2 && w->sizes[2] == 1 ? 1 : 0;
  EXPECT_EQ(stats.replays, 3 - traced_ones) << stats;
  EXPECT_EQ(stats.traces, 1 + traced_ones) << stats;
  EXPECT_GT(stats.native_regions, 0);
  EXPECT_EQ(stats.interpreted_regions, 0) << stats;
}

INSTANTIATE_TEST_SUITE_P(Cpu, WorkloadTest,
                         ::testing::ValuesIn(CpuWorkloadNames()),
                         [](const auto& info) { return info.param; });

// The language model's batches: next-token targets, ids below the
// vocabulary, and a loss near log(vocab) at initialization (the head starts
// small, so the first predictions are close to uniform).
TEST(GptWorkloadTest, StartsNearTheUniformLoss) {
  const Workload* w = FindWorkload("gpt_d64_l1_t32_b16");
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->gpt.has_value());
  WorkloadRun run(*w, CompileOptions{.mode = Mode::kEager});
  const double loss = run.Step().item();
  EXPECT_NEAR(loss, std::log(static_cast<double>(w->gpt->vocab)), 0.5);
}

}  // namespace
}  // namespace stepjit::bench
