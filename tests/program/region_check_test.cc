// The accuracy checker's runtime part: Program::RunChecked runs every
// generated region also interpreted and names the one that disagrees;
// ScopedMiscompileRegion breaks one region's kernel on purpose; and
// CompareTensors' tolerance rule (program/region_check.h).
//
// References: an interpreted program (ProgramOptions::codegen = false, the
// eager kernels) and Run on the same starting state. RunChecked and Run run
// the same kernels, so their outputs and final state must agree bit for bit;
// compiled against interpreted, within DefaultTolerance.
#include "program/region_check.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "ir/printer.h"
#include "ir/status.h"
#include "program/executor.h"
#include "runtime/ops.h"
#include "testing/miscompile_region.h"
#include "tests/program/region_check_step.h"

namespace stepjit::runtime {
namespace {

using ir::OpId;
using test::BuildProgram;
using test::ExpectSame;
using test::kStep;
using test::ParseVerified;
using test::Start;

std::vector<double> Values(const Tensor& t) {
  return t.to(DType::kF64).contiguous().to_vector<double>();
}

// The mismatches of one checked run of `p` from `start`.
std::vector<RegionMismatch> CheckedRun(const Program& p, const Start& start) {
  std::vector<Tensor> state = start.StateCopy();
  std::vector<RegionMismatch> mismatches;
  p.RunChecked(start.inputs, state, &mismatches);
  return mismatches;
}

TEST(RegionCheckTest, CleanProgramHasNoMismatchAndRunsAsRun) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  const Program compiled = BuildProgram(*g),
                interpreted = BuildProgram(*g, false);
  ASSERT_EQ(compiled.compiled_regions(), 3);
  const Start start(1);
  std::vector<Tensor> checked_state = start.StateCopy(),
                      run_state = start.StateCopy(),
                      eager_state = start.StateCopy();
  std::vector<RegionMismatch> mismatches = {RegionMismatch{}};
  const std::vector<Tensor> checked =
      compiled.RunChecked(start.inputs, checked_state, &mismatches);
  EXPECT_TRUE(mismatches.empty()) << ToString(mismatches.front());
  const std::vector<Tensor> run = compiled.Run(start.inputs, run_state);
  const std::vector<Tensor> eager = interpreted.Run(start.inputs, eager_state);
  ExpectSame(checked, run, "output");
  // The AdamW region wrote m, v and the step count into the donated state
  // buffers: the checker's reference ran on copies and changed nothing.
  ExpectSame(checked_state, run_state, "state");
  EXPECT_EQ(checked_state[1].item(), 4.0);
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_TRUE(CompareTensors(checked[i], eager[i]).ok()) << "output " << i;
  }
  for (size_t i = 0; i < eager_state.size(); ++i) {
    EXPECT_TRUE(CompareTensors(checked_state[i], eager_state[i]).ok())
        << "state " << i;
  }
}

TEST(RegionCheckTest, MiscompiledRegionIsNamedWithItsResultOpAndError) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  const std::string ir_before = ir::Print(*g);
  std::vector<RegionMismatch> mismatches;
  std::vector<Tensor> checked_state;
  const Start start(2);
  {
    // AdamW's bias correction 1 - beta^t becomes 1 + beta^t: the update of
    // v (result 2, from addcmul_) is wrong, m and the step count are not.
    ScopedMiscompileRegion miscompile("adamw", OpId::kSub, OpId::kAdd);
    const Program compiled = BuildProgram(*g);
    EXPECT_EQ(miscompile.miscompiled(), std::vector<std::string>{"adamw"});
    EXPECT_EQ(ir::Print(*g), ir_before);  // only the kernel is wrong
    checked_state = start.StateCopy();
    std::vector<Tensor> run_state = start.StateCopy();
    compiled.RunChecked(start.inputs, checked_state, &mismatches);
    compiled.Run(start.inputs, run_state);
    ExpectSame(checked_state, run_state, "state");
  }
  ASSERT_EQ(mismatches.size(), 1u);
  const RegionMismatch& m = mismatches[0];
  EXPECT_EQ(m.region, "adamw");
  EXPECT_EQ(m.node_index, 2);
  EXPECT_EQ(m.output, 2);
  EXPECT_EQ(m.op, "addcmul_");
  EXPECT_EQ(m.op_ir, "%8 = addcmul_ %p4, %7, %7");
  EXPECT_EQ(m.value, "%2#2");
  EXPECT_EQ(m.call_ir, "%2 = fusion @adamw(%t, %beta, %g, %m, %v)");
  EXPECT_EQ(m.numel, 40 * 33);
  // The step on v divides by 1 + 0.999^4 ~ 2 instead of 1 - 0.999^4 ~ 0.004:
  // most elements move far beyond f32's tolerance.
  EXPECT_GT(m.mismatched_elements, m.numel / 2);
  EXPECT_GT(m.max_rel_error, 0.1);
  EXPECT_TRUE(absl::StrContains(m.region_ir, "%4 = sub %3, %2 : f64[]"))
      << m.region_ir;
  // The generated value is the one in the state: v moved by the wrong step.
  const std::vector<double> v = Values(checked_state[4]);
  ASSERT_GE(m.worst_index, 0);
  EXPECT_EQ(v[m.worst_index], m.got_at_worst);
  const std::string line = ToString(m);
  EXPECT_TRUE(absl::StartsWith(line,
                               "adamw result 2 (%2#2, from `%8 = addcmul_ %p4, "
                               "%7, %7`, node 2, f32[40,33]): "))
      << line;
  EXPECT_TRUE(absl::StrContains(line, "worst at [")) << line;
}

TEST(RegionCheckTest, ResultOfTheFlippedOpIsNamedAndLaterRegionsStayClean) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  std::vector<RegionMismatch> mismatches;
  {
    // Empty name: the first region holding a tanh (the chain).
    ScopedMiscompileRegion miscompile("", OpId::kTanh, OpId::kSigmoid);
    const Program compiled = BuildProgram(*g);
    EXPECT_EQ(miscompile.miscompiled(), std::vector<std::string>{"chain"});
    mismatches = CheckedRun(compiled, Start(3));
  }
  // Both results of the chain are wrong; `post`, which reads the chain's
  // wrong sum, is compared with its own interpretation of that sum: clean.
  ASSERT_EQ(mismatches.size(), 2u);
  EXPECT_EQ(mismatches[0].region, "chain");
  EXPECT_EQ(mismatches[0].output, 0);
  EXPECT_EQ(mismatches[0].op, "tanh");
  EXPECT_EQ(mismatches[0].value, "%0#0");
  EXPECT_EQ(mismatches[0].node_index, 0);
  EXPECT_EQ(mismatches[1].region, "chain");
  EXPECT_EQ(mismatches[1].output, 1);
  EXPECT_EQ(mismatches[1].op, "sum");
  // tanh(y) in (-1, 1) against sigmoid(y) in (0, 1): far apart.
  EXPECT_GT(mismatches[0].max_abs_error, 0.1);
}

TEST(RegionCheckTest, HookOutsideItsScopeChangesNothing) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  { ScopedMiscompileRegion miscompile("post", OpId::kMul, OpId::kAdd); }
  const Program compiled = BuildProgram(*g);
  EXPECT_TRUE(CheckedRun(compiled, Start(4)).empty());
}

TEST(RegionCheckTest, InterpretedProgramHasNothingToCheck) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  ScopedMiscompileRegion miscompile("adamw", OpId::kSub, OpId::kAdd);
  const Program interpreted = BuildProgram(*g, false);
  EXPECT_TRUE(miscompile.miscompiled().empty());
  EXPECT_TRUE(CheckedRun(interpreted, Start(5)).empty());
}

// NaN and inf flow through a generated region: the same NaNs and the same
// infinities on both sides are agreement.
TEST(RegionCheckTest, NanAndInfinityAgreeWithThemselves) {
  std::unique_ptr<ir::Graph> g = ParseVerified(kStep);
  ASSERT_NE(g, nullptr);
  const Program compiled = BuildProgram(*g);
  Start start(6);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(32 * 48, 0.5f);
  x[0] = nan;
  x[5] = inf;
  x[7] = -inf;
  start.inputs[0] = from_vector(x, {32, 48});
  // A NaN moment m stays NaN (and makes v NaN there); v = +-inf stays so.
  start.state[3].view({-1}).slice(0, 0, 1).fill_(nan);
  start.state[4].view({-1}).slice(0, 1, 3).copy_(
      from_vector(std::vector<float>{inf, -inf}, {2}));
  std::vector<Tensor> state = start.StateCopy();
  std::vector<RegionMismatch> mismatches;
  const std::vector<Tensor> out =
      compiled.RunChecked(start.inputs, state, &mismatches);
  EXPECT_TRUE(mismatches.empty()) << ToString(mismatches.front());
  EXPECT_TRUE(std::isnan(Values(out[0])[0]));
  EXPECT_EQ(Values(out[0])[5], 1.0);  // tanh(inf)
  EXPECT_TRUE(std::isnan(Values(state[3])[0]));
  const std::vector<double> v = Values(state[4]);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], inf);
  EXPECT_EQ(v[2], -inf);
}

TEST(CompareTensorsTest, ToleranceByDtype) {
  const Tensor one = full({4}, 1.0);
  EXPECT_TRUE(CompareTensors(full({4}, 1.0 + 5e-6), one).ok());
  EXPECT_FALSE(CompareTensors(full({4}, 1.0 + 1e-4), one).ok());
  // atol near zero: 1e-7 is within, 1e-5 is not.
  EXPECT_TRUE(CompareTensors(full({4}, 1e-7), zeros({4})).ok());
  EXPECT_FALSE(CompareTensors(full({4}, 1e-5), zeros({4})).ok());
  const Tensor one64 = full({2}, 1.0, {.dtype = DType::kF64});
  EXPECT_TRUE(
      CompareTensors(full({2}, 1.0 + 1e-13, {.dtype = DType::kF64}), one64)
          .ok());
  EXPECT_FALSE(
      CompareTensors(full({2}, 1.0 + 1e-10, {.dtype = DType::kF64}), one64)
          .ok());
  // One bf16 step above 1 (2^-7) is within; two are not.
  const Tensor one16 = full({2}, 1.0, {.dtype = DType::kBF16});
  EXPECT_TRUE(
      CompareTensors(full({2}, 1.0078125, {.dtype = DType::kBF16}), one16)
          .ok());
  EXPECT_FALSE(
      CompareTensors(full({2}, 1.015625, {.dtype = DType::kBF16}), one16).ok());
  // Integers exactly, past 2^53 too.
  const int64_t big = (int64_t{1} << 53) + 1;
  const Tensor ints = from_vector(std::vector<int64_t>{big, 2}, {2});
  EXPECT_TRUE(CompareTensors(ints, ints.clone()).ok());
  EXPECT_FALSE(
      CompareTensors(from_vector(std::vector<int64_t>{big - 1, 2}, {2}), ints)
          .ok());
}

TEST(CompareTensorsTest, NanAndInfinityRules) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto t = [](std::vector<double> v) {
    return from_vector(v, {static_cast<int64_t>(v.size())});
  };
  EXPECT_TRUE(CompareTensors(t({nan, inf, -inf}), t({nan, inf, -inf})).ok());
  const TensorDiff nan_vs_one = CompareTensors(t({1, nan}), t({1, 1}));
  EXPECT_EQ(nan_vs_one.mismatched_elements, 1);
  EXPECT_EQ(nan_vs_one.worst_index, 1);
  EXPECT_EQ(nan_vs_one.max_abs_error, inf);
  EXPECT_FALSE(CompareTensors(t({1}), t({nan})).ok());
  EXPECT_FALSE(CompareTensors(t({inf}), t({-inf})).ok());
  EXPECT_FALSE(CompareTensors(t({inf}), t({1e308})).ok());
}

TEST(CompareTensorsTest, ReportsTheWorstElementWithCoordinates) {
  const Tensor want = zeros({2, 3});
  const Tensor got =
      from_vector(std::vector<float>{0, 0.5f, 0, 0, 0, 2}, {2, 3});
  const TensorDiff d = CompareTensors(got, want);
  EXPECT_EQ(d.numel, 6);
  EXPECT_EQ(d.mismatched_elements, 2);
  EXPECT_EQ(d.worst_index, 5);
  EXPECT_EQ(d.max_abs_error, 2);
  EXPECT_EQ(ToString(d, want.shape()),
            "2 of 6 elements differ; max abs error 2, max rel error inf; worst "
            "at [1, 2]: got 2, want 0");
  const TensorDiff shapes = CompareTensors(zeros({3, 2}), want);
  EXPECT_TRUE(shapes.shape_differs);
  EXPECT_FALSE(shapes.ok());
}

}  // namespace
}  // namespace stepjit::runtime
