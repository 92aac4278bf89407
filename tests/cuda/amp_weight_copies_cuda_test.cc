// amp-weight-copies on CUDA: the kept bf16 weight copies are device state,
// written by the generated update kernels inside the captured CUDA graph and
// converted again on the caller's stream when a weight is written between
// replays; the results are bit for bit those of casting every weight at
// every step. Runs on the host emulator unless
// STEPJIT_TEST_CUDA_BACKEND=driver.
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_backend.h"
#include "tests/util/adamw_mlp.h"

namespace stepjit {
namespace {

using test::CudaTest;
using test::Values;

const Device kCuda = Device::cuda(0);

TEST_F(CudaTest, KeptBf16WeightCopiesMatchCastingEveryStepInsideACudaGraph) {
  test::AdamWMlp kept({20, 32, 6}, 21, kCuda), each({20, 32, 6}, 21, kCuda);
  const CompileOptions options{.amp = DType::kBF16};
  auto fast_kept =
      compile([&](const Tensor& x, const Tensor& y) { return kept.Step(x, y); },
              options);
  auto fast_each =
      compile([&](const Tensor& x, const Tensor& y) { return each.Step(x, y); },
              options);
  Generator g(6);
  for (int step = 0; step < 9; ++step) {
    const Tensor x = randn({16, 20}, {}, &g).to(kCuda);
    const Tensor y = randint(0, 6, {16}, {.dtype = DType::kI64}, &g).to(kCuda);
    if (step == 5) {
      // Between two graph replays, from outside the step.
      NoGradGuard no_grad;
      kept.model.parameters()[0].mul_(0.5);
      each.model.parameters()[0].mul_(0.5);
    }
    const double lk = fast_kept(x, y).item();
    setenv("STEPJIT_DISABLE", "amp-weight-copies", 1);
    const double le = fast_each(x, y).item();
    unsetenv("STEPJIT_DISABLE");
    ASSERT_EQ(lk, le) << "step " << step;
    const std::vector<Tensor> pk = kept.model.parameters(),
                              pe = each.model.parameters();
    for (size_t i = 0; i < pk.size(); ++i) {
      ASSERT_EQ(Values(pk[i]), Values(pe[i]))
          << "step " << step << " parameter " << i;
    }
  }
  const std::string explain = fast_kept.explain();
  EXPECT_NE(explain.find("replayed as a CUDA graph"), std::string::npos)
      << explain;
  std::ostringstream ir;
  fast_kept.dump_ir(ir);
  EXPECT_NE(ir.str().find("assign %s0.as_bf16"), std::string::npos) << ir.str();
  EXPECT_EQ(ir.str().find("= cast %s"), std::string::npos) << ir.str();
}

}  // namespace
}  // namespace stepjit
