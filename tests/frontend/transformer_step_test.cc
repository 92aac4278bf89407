// A small GPT built from nn::TransformerBlock (causal multi-head attention
// through scaled_dot_product_attention, pre-LN, GELU MLP, dropout) trained
// for 30 AdamW steps, compiled against eager on the CPU: losses and
// parameters within tolerance, no region interpreted, the 3-d Linear layers'
// bias in their GEMM epilogues.
//
// Tolerances: f32 1e-4 relative + 1e-5 (summation order and exp/log
// implementation, compounded over 30 AdamW steps); bf16 autocast compares
// losses only, 2e-2 relative + 2e-2 (a last-bit difference in a bf16 matmul
// input rounds differently and AdamW's normalized updates carry it).
#include <string>

#include "gtest/gtest.h"
#include "tests/util/tiny_gpt.h"

namespace stepjit {
namespace {

const Device kCpu = Device::cpu();

int Absorbed(const std::string& passes) {
  const std::string key = "gemm epilogues absorbed=";
  const size_t at = passes.find(key);
  return at == std::string::npos ? 0
                                 : std::stoi(passes.substr(at + key.size()));
}

TEST(TransformerStepTest, CompiledFollowsEagerForThirtySteps) {
  const test::TinyGptRun got =
      test::TrainTinyGpt(kCpu, true, DType::kF32, 0.0, 30);
  const test::TinyGptRun want =
      test::TrainTinyGpt(kCpu, false, DType::kF32, 0.0, 30);
  test::ExpectNear(got.values, want.values, 1e-4, 1e-5);
  test::ExpectNoneInterpreted(got.explain);
  EXPECT_EQ(got.stats.traces, 1) << got.explain;
  // qkv, out_proj, fc1, fc2 of both blocks and the head take their bias.
  EXPECT_GE(Absorbed(got.stats.passes), 9) << got.stats.passes;
}

TEST(TransformerStepTest, CompiledWithDropoutFollowsEager) {
  const test::TinyGptRun got =
      test::TrainTinyGpt(kCpu, true, DType::kF32, 0.1, 30);
  const test::TinyGptRun want =
      test::TrainTinyGpt(kCpu, false, DType::kF32, 0.1, 30);
  test::ExpectNear(got.values, want.values, 1e-4, 1e-5);
  test::ExpectNoneInterpreted(got.explain);
}

TEST(TransformerStepTest, CompiledBf16FollowsEagerAutocast) {
  test::TinyGptRun got = test::TrainTinyGpt(kCpu, true, DType::kBF16, 0.0, 30);
  test::TinyGptRun want =
      test::TrainTinyGpt(kCpu, false, DType::kBF16, 0.0, 30);
  got.values.resize(30);
  want.values.resize(30);
  test::ExpectNear(got.values, want.values, 2e-2, 2e-2);
  test::ExpectNoneInterpreted(got.explain);
}

}  // namespace
}  // namespace stepjit
