// Compiled training steps whose regions hold row reductions (softmax,
// layer_norm, cross_entropy and their backward patterns): every region runs
// as generated code on the CPU (explain() lists none interpreted), and
// losses and parameters follow the eager step over several steps.
//
// Tolerances: the compiled step's regions differ from eager only in
// summation order and the exp/log implementation (row reductions in f64, a
// few ulps in f32); over 5 AdamW steps that stays below 1e-4 relative (+1e-5
// absolute) in f32. With bf16 autocast, a last-bit difference in a bf16
// matmul input may round differently, so 2e-2 relative (+1e-3) is allowed.
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/util/row_steps.h"

namespace stepjit {
namespace {

using test::ExpectNear;
using test::ExpectNoneInterpreted;

const Device kCpu = Device::cpu();

// The MLP's step compiled against eager with optimizer `Opt` and `amp`
// autocast: losses and parameters within (rtol, atol), no region
// interpreted.
template <typename Opt, typename Options>
void ExpectMlpFollowsEager(Options o, DType amp, double rtol, double atol) {
  std::string explain;
  ExpectNear(test::TrainMlp<Opt>(kCpu, true, o, amp, &explain),
             test::TrainMlp<Opt>(kCpu, false, o, amp, nullptr), rtol, atol);
  ExpectNoneInterpreted(explain);
}

TEST(RowRegionsTest, FashionMnistStepRunsNoRegionInterpreted) {
  ExpectMlpFollowsEager<optim::AdamW>(optim::AdamWOptions{.lr = 1e-3},
                                      DType::kF32, 1e-4, 1e-5);
  ExpectMlpFollowsEager<optim::SGD>(optim::SGDOptions{.lr = 0.05}, DType::kF32,
                                    1e-4, 1e-5);
}

// With bf16 autocast, AdamW's sign-like first steps turn a last-bit
// difference in a near-zero bf16 gradient into a full lr-sized one, so the
// numbers are compared under SGD; AdamW is checked for interpreted regions.
TEST(RowRegionsTest, FashionMnistBf16StepRunsNoRegionInterpreted) {
  ExpectMlpFollowsEager<optim::SGD>(optim::SGDOptions{.lr = 0.05}, DType::kBF16,
                                    2e-2, 1e-3);
  std::string explain;
  test::TrainMlp<optim::AdamW>(kCpu, true, optim::AdamWOptions{.lr = 1e-3},
                               DType::kBF16, &explain);
  ExpectNoneInterpreted(explain);
}

TEST(RowRegionsTest, TransformerBlockStepRunsNoRegionInterpreted) {
  std::string explain;
  ExpectNear(test::TrainBlock(kCpu, true, &explain),
             test::TrainBlock(kCpu, false, nullptr), 1e-4, 1e-5);
  ExpectNoneInterpreted(explain);
}

// A region no CPU kernel is generated for (an integer abs, which has no
// integer lowering, fused with the cast that follows it) runs interpreted,
// and explain() says why.
TEST(RowRegionsTest, ExplainListsAnInterpretedRegionWithItsReason) {
  Tensor w = ones({8});
  auto step = [&](const Tensor& x, const Tensor& y) {
    return sum(x * (abs(y + y) * w));
  };
  auto fast = compile(step);
  Generator gen(2);
  const Tensor x = randn({8}, {}, &gen);
  const Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &gen);
  for (int s = 0; s < 3; ++s) fast(x, y);
  const std::string explain = fast.explain();
  EXPECT_NE(explain.find("runs interpreted: integer arithmetic (abs)"),
            std::string::npos)
      << explain;
  EXPECT_NE(explain.find(" 1 interpreted"), std::string::npos) << explain;
}

}  // namespace
}  // namespace stepjit
