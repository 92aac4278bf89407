// Program::RunChecked on CUDA: generated CUDA regions, alone and launched
// together as a multi-region kernel, are checked against their bodies run
// as eager CUDA ops, and a region miscompiled on purpose is named. Runs on
// the host emulator unless STEPJIT_TEST_CUDA_BACKEND=driver.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/status.h"
#include "program/executor.h"
#include "program/region_check.h"
#include "testing/miscompile_region.h"
#include "tests/cuda/cuda_test_backend.h"
#include "tests/program/region_check_step.h"

namespace stepjit {
namespace {

using runtime::CompareTensors;
using runtime::Program;
using runtime::RegionMismatch;
using runtime::ScopedMiscompileRegion;
using test::CudaTest;
using test::kStep;
using test::ParseVerified;
using test::Start;

const Device kCuda = Device::cuda(0);

Program BuildOnCuda(const ir::Graph& g, bool multi_region) {
  runtime::ProgramOptions options;
  options.device = kCuda;
  options.cuda_multi_region = multi_region;
  absl::StatusOr<Program> p = Program::Build(g, options);
  SJ_CHECK(p.ok(), p.status().message());
  return *std::move(p);
}

// With multi_region, `post` and `adamw` (consecutive, independent) launch
// as one kernel per phase; without, one by one.
class RegionCheckCudaTest : public CudaTest,
                            public ::testing::WithParamInterface<bool> {};

TEST_P(RegionCheckCudaTest, CleanProgramHasNoMismatchAndEndsAsRun) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  const Program p = BuildOnCuda(*g, GetParam());
  ASSERT_EQ(p.compiled_regions(), 3);
  EXPECT_EQ(p.cuda_region_groups(), GetParam() ? 1 : 0);
  const Start start(7, kCuda);
  std::vector<Tensor> checked_state = start.StateCopy(),
                      run_state = start.StateCopy();
  std::vector<RegionMismatch> mismatches;
  const std::vector<Tensor> checked =
      p.RunChecked(start.inputs, checked_state, &mismatches);
  EXPECT_TRUE(mismatches.empty()) << ToString(mismatches.front());
  const std::vector<Tensor> run = p.Run(start.inputs, run_state);
  for (size_t i = 0; i < run.size(); ++i) {
    EXPECT_EQ(test::Values(checked[i]), test::Values(run[i])) << "output " << i;
  }
  for (size_t i = 0; i < run_state.size(); ++i) {
    EXPECT_EQ(test::Values(checked_state[i]), test::Values(run_state[i]))
        << "state " << i;
  }
  EXPECT_EQ(checked_state[1].item(), 4.0);
}

TEST_P(RegionCheckCudaTest, MiscompiledRegionIsNamed) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  std::vector<RegionMismatch> mismatches;
  {
    ScopedMiscompileRegion miscompile("adamw", ir::OpId::kSub, ir::OpId::kAdd);
    const Program p = BuildOnCuda(*g, GetParam());
    EXPECT_EQ(miscompile.miscompiled(), std::vector<std::string>{"adamw"});
    const Start start(8, kCuda);
    std::vector<Tensor> checked_state = start.StateCopy(),
                        run_state = start.StateCopy();
    p.RunChecked(start.inputs, checked_state, &mismatches);
    // The miscompiled kernel is what Run runs too: the same wrong state.
    p.Run(start.inputs, run_state);
    for (size_t i = 0; i < run_state.size(); ++i) {
      EXPECT_TRUE(CompareTensors(checked_state[i], run_state[i], {0, 0}).ok())
          << "state " << i;
    }
  }
  ASSERT_EQ(mismatches.size(), 1u);
  EXPECT_EQ(mismatches[0].region, "adamw");
  EXPECT_EQ(mismatches[0].node_index, 2);
  EXPECT_EQ(mismatches[0].output, 2);
  EXPECT_EQ(mismatches[0].op, "addcmul_");
  EXPECT_GT(mismatches[0].mismatched_elements, mismatches[0].numel / 2);
}

INSTANTIATE_TEST_SUITE_P(MultiRegion, RegionCheckCudaTest, ::testing::Bool());

}  // namespace
}  // namespace stepjit
