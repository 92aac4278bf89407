// A llama-style block step with nn::RMSNorm (pre-norm, SiLU MLP, residual),
// compiled, against the same step run eagerly: losses and parameters over 6
// AdamW steps (f32 and bf16 autocast), every region generated (none
// interpreted), and rms_norm's ops fused (fewer kernels than ops).
//
// Tolerances: f32 regions sum rows in lanes, not in element order, and
// GEMMs differ in blocking: a few ulps per op, below 1e-5 relative after 6
// steps (as tests/frontend/row_regions_test.cc). bf16: one bf16 rounding
// (2^-8) can differ where a fused region keeps f32 that eager rounds, so
// 2e-2 relative.
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/util/row_steps.h"

namespace stepjit {
namespace {

struct LlamaBlock {
  static constexpr int64_t kD = 24, kHidden = 40, kClasses = 7;
  nn::RMSNorm norm1{kD}, norm2{kD};
  nn::Linear up{kD, kHidden}, down{kHidden, kD}, head{kD, kClasses};
  std::vector<Tensor> parameters() {
    std::vector<Tensor> ps;
    for (const auto& group :
         {norm1->parameters(), up->parameters(), down->parameters(),
          norm2->parameters(), head->parameters()}) {
      ps.insert(ps.end(), group.begin(), group.end());
    }
    return ps;
  }
  Tensor operator()(const Tensor& x) {
    const Tensor h = x + down(nn::functional::silu(up(norm1(x))));
    return head(norm2(h));
  }
};

std::vector<std::vector<float>> Train(bool compiled, DType amp,
                                      std::string* explain,
                                      CompileStats* stats) {
  manual_seed(31);
  LlamaBlock model;
  optim::AdamW opt(model.parameters(), {.lr = 3e-3});
  Generator gen(32);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int s = 0; s < 6; ++s) {
    const Tensor x = randn({13, LlamaBlock::kD}, {}, &gen);
    const Tensor y =
        randint(0, LlamaBlock::kClasses, {13}, {.dtype = DType::kI64}, &gen);
    batches.emplace_back(x, y);
  }
  return test::TrainCrossEntropy([&](const Tensor& x) { return model(x); }, opt,
                                 model.parameters(), compiled, amp, batches,
                                 explain, stats);
}

// The step trained compiled and eagerly with `amp` autocast: within (rtol,
// atol), replayed, no region interpreted.
void ExpectCompiledFollowsEager(DType amp, double rtol, double atol,
                                std::string& explain, CompileStats& stats) {
  const auto got = Train(true, amp, &explain, &stats);
  test::ExpectNear(got, Train(false, amp, nullptr, nullptr), rtol, atol);
  EXPECT_GT(stats.replays, 0) << explain;
  test::ExpectNoneInterpreted(explain);
}

TEST(RmsNormCompileTest, CompiledLlamaBlockStepFollowsEager) {
  std::string explain;
  CompileStats stats;
  ExpectCompiledFollowsEager(DType::kF32, 1e-5, 1e-6, explain, stats);
  // rms_norm is written with cast, mul, mean, add, rsqrt and mul: fused,
  // the step launches far fewer kernels than it dispatches ops.
  EXPECT_LT(stats.kernels_per_step * 2, stats.ops_per_step) << explain;
}

TEST(RmsNormCompileTest, CompiledBf16StepFollowsEagerAutocast) {
  std::string explain;
  CompileStats stats;
  ExpectCompiledFollowsEager(DType::kBF16, 2e-2, 2e-3, explain, stats);
}

}  // namespace
}  // namespace stepjit
