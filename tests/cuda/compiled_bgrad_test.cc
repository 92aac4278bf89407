// compile(step) of a training step with biased Linear layers on CUDA: the
// gemm-bgrad pass moves each bias-gradient sum into its weight-gradient GEMM
// (cuBLASLt's BGRADB epilogue on a GPU, runtime::cpu::Gemm on the host
// emulator), and the bias gradients and updated biases match the eager step
// run on CUDA. On the CPU the pass does not run. Runs on the host emulator
// unless STEPJIT_TEST_CUDA_BACKEND=driver.
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/dispatch.h"
#include "tests/cuda/cuda_test_backend.h"
#include "tests/util/adamw_mlp.h"

namespace stepjit {
namespace {

using test::CudaTest;
using test::Values;
using ::testing::HasSubstr;
using ::testing::Not;

const Device kCuda = Device::cuda(0);

struct Mlp : test::AdamWMlp {
  explicit Mlp(Device device) : AdamWMlp({20, 32, 6}, 21, device) {}
  nn::Linear l1 = linears[0], l2 = linears[1];
};

// |a - b| <= rtol |b| + atol, elementwise, naming the first misses.
void ExpectNear(const Tensor& got, const Tensor& want, double rtol, double atol,
                const std::string& what) {
  const std::vector<double> a = Values(got), b = Values(want);
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::abs(a[i] - b[i]) <= rtol * std::abs(b[i]) + atol) &&
        ++bad <= 3) {
      ADD_FAILURE() << what << "[" << i << "] is " << a[i] << ", eager "
                    << b[i];
    }
  }
}

TEST_F(CudaTest, BiasGradientsComeFromTheWeightGradientGemms) {
  Mlp eager(kCuda), compiled(kCuda);
  auto fast = compile(
      [&](const Tensor& x, const Tensor& y) { return compiled.Step(x, y); });
  Generator gen(8);
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({16, 20}, {}, &gen).to(kCuda);
    const Tensor y =
        randint(0, 6, {16}, {.dtype = DType::kI64}, &gen).to(kCuda);
    const double le = eager.Step(x, y).item();
    const double lc = fast(x, y).item();
    // The GEMM sums a bias gradient in another order than the eager sum:
    // 1e-5 relative per step, as for fused regions.
    EXPECT_NEAR(lc, le, 1e-5 * std::abs(le) + 1e-6) << "step " << i;
    // The replay's bias gradients (grad bindings) and updated biases.
    for (auto [c, e, name] : {std::tuple{compiled.l1, eager.l1, "l1"},
                              std::tuple{compiled.l2, eager.l2, "l2"}}) {
      ExpectNear(c->bias.grad(), e->bias.grad(), 1e-5, 1e-6,
                 std::string(name) + ".bias.grad");
      ExpectNear(c->bias, e->bias, 1e-4, 1e-5, std::string(name) + ".bias");
      ExpectNear(c->weight, e->weight, 1e-4, 1e-5,
                 std::string(name) + ".weight");
    }
  }
  EXPECT_EQ(fast.stats().replays, 2);  // 1 warmup, 1 trace
  // Both layers' weight-gradient matmuls return their bias gradients.
  const std::string explain = fast.explain();
  EXPECT_THAT(explain, HasSubstr("gemm bias-gradients absorbed=2")) << explain;
  std::ostringstream ir;
  fast.dump_ir(ir);
  EXPECT_THAT(ir.str(),
              HasSubstr("epilogue = \"bgrad\"} : (f32[32,20], f32[32])"));
  EXPECT_THAT(ir.str(),
              HasSubstr("epilogue = \"bgrad\"} : (f32[6,32], f32[6])"));
}

// The 2-result matmul eagerly on CUDA (what a replay dispatches) against
// the CPU's: the product and the bias gradient, also of a product with no
// columns, whose bias gradient still sums dY.
TEST_F(CudaTest, TheTwoResultMatmulMatchesTheCpu) {
  const ir::Attrs attrs{{ir::AttrKey::kTransposeA, true},
                        {ir::AttrKey::kEpilogue, std::string("bgrad")}};
  Generator gen(4);
  for (int64_t n : {10, 0}) {
    const Tensor dy = randn({32, 12}, {}, &gen), x = randn({32, n}, {}, &gen);
    const std::vector<Tensor> cpu =
        runtime::DispatchResults(ir::OpId::kMatmul, {dy, x}, attrs, 2);
    const std::vector<Tensor> cuda = runtime::DispatchResults(
        ir::OpId::kMatmul, {dy.to(kCuda), x.to(kCuda)}, attrs, 2);
    ASSERT_TRUE(cuda[1].device().is_cuda());
    ExpectNear(cuda[0], cpu[0], 1e-5, 1e-5, "product");
    ExpectNear(cuda[1], cpu[1], 1e-5, 1e-5, "bias gradient");
  }
}

TEST(CompiledBiasGradTest, ACpuStepKeepsItsSumKernels) {
  Mlp run(Device::cpu());
  auto fast =
      compile([&](const Tensor& x, const Tensor& y) { return run.Step(x, y); });
  Generator gen(8);
  for (int i = 0; i < 3; ++i) {
    fast(randn({16, 20}, {}, &gen),
         randint(0, 6, {16}, {.dtype = DType::kI64}, &gen));
  }
  EXPECT_THAT(fast.explain(), Not(HasSubstr("gemm-bgrad")));
  std::ostringstream ir;
  fast.dump_ir(ir);
  EXPECT_THAT(ir.str(), HasSubstr("epilogue = \"bgrad\"} : f32[32,20]"));
  EXPECT_THAT(ir.str(), Not(HasSubstr("f32[32,20], f32[32])")));
}

}  // namespace
}  // namespace stepjit
