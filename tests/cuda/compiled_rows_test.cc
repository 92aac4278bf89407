// Compiled training steps on CUDA whose regions hold row reductions
// (softmax, layer_norm, cross_entropy and their backward patterns): every
// region runs as generated CUDA code (explain() lists none interpreted), and
// losses and parameters follow the same step run eagerly on the CPU (an MLP,
// a transformer block, and a small GPT of nn::TransformerBlocks). Runs
// on the host emulator unless STEPJIT_TEST_CUDA_BACKEND=driver.
//
// Tolerances: the compiled regions differ from the eager CPU kernels in
// summation order (a row's sum is a tree of per-lane sums; GEMMs sum in
// their own order) and, on a GPU, in the exp/log implementation: a few ulps
// in f32 per op, which over 5 AdamW steps stays below 1e-4 relative (+1e-5
// absolute), as for the CPU backend (tests/frontend/row_regions_test.cc).
// On a real GPU (cuBLASLt, CUDA's libm) 1e-3 relative (+1e-4) is allowed.
#include <string>
#include <vector>

#include "devices/cuda/backend.h"
#include "devices/cuda/ops.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "testing/cuda_emulator/emulator_backend.h"
#include "tests/cuda/cuda_test_backend.h"
#include "tests/util/row_steps.h"
#include "tests/util/tiny_gpt.h"

namespace stepjit {
namespace {

using test::CudaTest;
using test::ExpectNoneInterpreted;

const Device kCuda = Device::cuda(0);
const Device kCpu = Device::cpu();

void ExpectNear(const std::vector<std::vector<float>>& got,
                const std::vector<std::vector<float>>& want) {
  test::ExpectNear(got, want, test::OnRealGpu() ? 1e-3 : 1e-4,
                   test::OnRealGpu() ? 1e-4 : 1e-5);
}

std::vector<std::vector<float>> TrainMlp(Device device, bool compiled,
                                         std::string* explain) {
  return test::TrainMlp<optim::AdamW>(
      device, compiled, optim::AdamWOptions{.lr = 1e-3}, DType::kF32, explain);
}

TEST_F(CudaTest, CompiledFashionMnistStepRunsNoRegionInterpreted) {
  std::string explain;
  const auto got = TrainMlp(kCuda, true, &explain);
  ExpectNear(got, TrainMlp(kCpu, false, nullptr));
  ExpectNoneInterpreted(explain);
}

TEST_F(CudaTest, CompiledTransformerBlockStepRunsNoRegionInterpreted) {
  std::string explain;
  const auto got = test::TrainBlock(kCuda, true, &explain);
  ExpectNear(got, test::TrainBlock(kCpu, false, nullptr));
  ExpectNoneInterpreted(explain);
}

// The small GPT of tests/util/tiny_gpt.h (nn::TransformerBlock, causal
// attention, dropout 0.1) for 30 AdamW steps on CUDA against eager on the
// CPU (dropout draws the same Philox stream on both devices).
TEST_F(CudaTest, CompiledTinyGptFollowsEagerCpu) {
  const test::TinyGptRun got =
      test::TrainTinyGpt(kCuda, true, DType::kF32, 0.1, 30);
  ExpectNear(got.values,
             test::TrainTinyGpt(kCpu, false, DType::kF32, 0.1, 30).values);
  ExpectNoneInterpreted(got.explain);
}

// Every matmul of the GPT's steps, eager and compiled, attention's batched
// products over permuted q/k/v views included, is one GEMM call on the
// device (a strided-batched one over all B * H products), not one per batch
// entry: the backend's GEMM calls equal the matmul ops run.
TEST_F(CudaTest, EveryMatmulOfAGptStepIsOneGemmCall) {
  runtime::cuda::Backend* b = runtime::cuda::GetBackend();
  if (!runtime::cuda::IsEmulatorBackend(*b))
    GTEST_SKIP() << "counts the emulator's GEMM calls";
  const int64_t matmuls_before = runtime::cuda::GetEagerStats().gemms;
  const int64_t calls_before = runtime::cuda::GetEmulatorStats(*b).gemms;
  // Without CUDA graphs: a graph replay runs its captured GEMMs again
  // without a matmul op.
  const test::TinyGptRun run = test::TrainTinyGpt(kCuda, true, DType::kF32, 0.0,
                                                  6, /*cuda_graphs=*/false);
  ASSERT_TRUE(b->SynchronizeDevice().ok());
  const int64_t matmuls = runtime::cuda::GetEagerStats().gemms - matmuls_before;
  EXPECT_GT(run.stats.replays, 0);
  // 2 blocks x (QKV, 2 attention products, out projection, 2 MLP) + head,
  // each with its backward's products, over 6 steps: well over a hundred.
  EXPECT_GT(matmuls, 100);
  EXPECT_EQ(runtime::cuda::GetEmulatorStats(*b).gemms - calls_before, matmuls);
}

}  // namespace
}  // namespace stepjit
