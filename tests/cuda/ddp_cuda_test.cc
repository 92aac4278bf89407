// nn::DistributedDataParallel on CUDA parameters in a world of one. The
// reducer's path is device-neutral: gradients equal the unwrapped CUDA
// model's bit for bit (also when the module moved to the GPU after it was
// wrapped: the plan regroups by device), and compiled replays follow eager.
// Runs on the host emulator unless STEPJIT_TEST_CUDA_BACKEND=driver.
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_backend.h"
#include "tests/util/train_step.h"
#include "training/nn/ddp.h"

namespace stepjit {
namespace {

using test::Values;

const Device kCuda = Device::cuda(0);

class DdpCudaTest : public test::CudaTest {
 protected:
  void SetUp() override {
    test::CudaTest::SetUp();
    if (IsSkipped()) return;
    dist::InitOptions single;
    single.backend = "single";
    dist::init(single);
  }
};

nn::Sequential MakeModel() {
  manual_seed(21);
  return nn::Sequential(nn::Linear(20, 32), nn::ReLU(), nn::Linear(32, 6));
}

TEST_F(DdpCudaTest, GradientsEqualTheUnwrappedModelsAfterMovingToTheGpu) {
  nn::Sequential plain = MakeModel(), wrapped = MakeModel();
  plain.to(kCuda);
  // Wrapped on the CPU, moved afterwards: the next backward regroups.
  nn::DistributedDataParallel ddp(wrapped, {.bucket_cap_mb = 0.001});
  ddp->to(kCuda);
  Generator gen(3);
  const Tensor x = randn({8, 20}, {}, &gen).to(kCuda);
  const Tensor y = randint(0, 6, {8}, {.dtype = DType::kI64}, &gen).to(kCuda);
  cross_entropy(plain(x), y).backward();
  cross_entropy(ddp(x), y).backward();
  const auto a = plain.parameters(), b = wrapped.parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(b[i].grad().defined());
    EXPECT_TRUE(b[i].grad().device().is_cuda());
    EXPECT_EQ(Values(a[i].grad()), Values(b[i].grad())) << "parameter " << i;
  }
  EXPECT_EQ(ddp->num_syncs(), static_cast<int64_t>(ddp->buckets().size()));
  EXPECT_GE(ddp->buckets().size(), 2u);
}

TEST_F(DdpCudaTest, CompiledStepReplaysEager) {
  auto train = [](Mode mode, std::string* ir) {
    nn::Sequential model = MakeModel();
    model.to(kCuda);
    nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.001});
    optim::SGD opt(ddp->parameters(), {.lr = 0.05, .momentum = 0.9});
    auto step = test::CrossEntropyStep(ddp, opt);
    auto fast = compile(step, {.mode = mode});
    Generator gen(4);
    std::vector<std::vector<double>> out;
    for (int i = 0; i < 6; ++i) {
      const Tensor x = randn({8, 20}, {}, &gen).to(kCuda);
      const Tensor y =
          randint(0, 6, {8}, {.dtype = DType::kI64}, &gen).to(kCuda);
      out.push_back(Values(fast(x, y)));
    }
    for (const Tensor& p : ddp->parameters()) out.push_back(Values(p));
    if (ir != nullptr) {
      std::ostringstream os;
      fast.dump_ir(os);
      *ir = os.str();
    }
    return out;
  };
  std::string ir;
  const auto eager = train(Mode::kEager, nullptr);
  const auto compiled = train(Mode::kCompiled, &ir);
  // As in compiled_step_test.cc: generated kernels on a real GPU may round
  // differently from the eager ones, 1e-5 relative on losses, 1e-4 on
  // parameters (entries 0-5 are losses).
  ASSERT_EQ(eager.size(), compiled.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    ASSERT_EQ(eager[i].size(), compiled[i].size());
    const double rel = i < 6 ? 1e-5 : 1e-4;
    for (size_t j = 0; j < eager[i].size(); ++j) {
      EXPECT_NEAR(compiled[i][j], eager[i][j],
                  rel * std::abs(eager[i][j]) + 1e-6)
          << "entry " << i << "[" << j << "]";
    }
  }
  EXPECT_NE(ir.find("all_reduce"), std::string::npos) << ir;
}

}  // namespace
}  // namespace stepjit
