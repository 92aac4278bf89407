// Checkpoints of CUDA tensors: a CPU-trained checkpoint loads into a model,
// AdamW and GradScaler on the device (state created there, values exact),
// and saving from the device writes the same bytes back.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_backend.h"

namespace stepjit {
namespace {

using test::CudaTest;
using test::Values;

nn::Sequential Mlp(uint64_t seed) {
  manual_seed(seed);
  return nn::Sequential(nn::Linear(6, 8), nn::ReLU(), nn::Linear(8, 3));
}

TEST_F(CudaTest, CheckpointLoadsOntoTheDeviceAndSavesBackExactly) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string path =
      dir + "/stepjit_ckpt_cuda_" + std::to_string(::getpid());
  const std::string again = path + "_again";

  nn::Sequential cpu = Mlp(1);
  optim::AdamW cpu_opt(cpu.parameters(), {.lr = 1e-2});
  amp::GradScaler cpu_scaler({.init_scale = 512.0});
  Generator gen(4);
  for (int i = 0; i < 2; ++i) {
    cpu_opt.zero_grad();
    cross_entropy(cpu(randn({5, 6}, {}, &gen)),
                  randint(0, 3, {5}, {.dtype = DType::kI64}, &gen))
        .backward();
    cpu_opt.step();
  }
  ASSERT_TRUE(SaveCheckpoint(path, {.model = cpu.ptr(),
                                    .optimizer = &cpu_opt,
                                    .scaler = &cpu_scaler})
                  .ok());

  nn::Sequential gpu = Mlp(2);
  gpu->to(Device::cuda(0));
  optim::AdamW gpu_opt(gpu.parameters(), {.lr = 1e-2});
  amp::GradScaler gpu_scaler({.init_scale = 512.0, .device = Device::cuda(0)});
  const TrainingState state{
      .model = gpu.ptr(), .optimizer = &gpu_opt, .scaler = &gpu_scaler};
  const absl::Status s = LoadCheckpoint(path, state);
  ASSERT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(gpu.parameters()[i].device().is_cuda());
    EXPECT_EQ(Values(gpu.parameters()[i]), Values(cpu.parameters()[i]));
    EXPECT_TRUE(gpu_opt.state(i).exp_avg.device().is_cuda());
    EXPECT_EQ(Values(gpu_opt.state(i).exp_avg_sq),
              Values(cpu_opt.state(i).exp_avg_sq));
  }
  EXPECT_EQ(gpu_opt.step_count().item<float>(), 2.0f);
  EXPECT_EQ(gpu_scaler.get_scale(), 512.0);

  ASSERT_TRUE(SaveCheckpoint(again, state).ok());
  absl::StatusOr<StateDict> a = LoadSafetensors(path);
  absl::StatusOr<StateDict> b = LoadSafetensors(again);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->metadata, b->metadata);
  ASSERT_EQ(a->tensors.size(), b->tensors.size());
  for (size_t i = 0; i < a->tensors.size(); ++i) {
    EXPECT_EQ(a->tensors[i].first, b->tensors[i].first);
    EXPECT_EQ(Values(a->tensors[i].second), Values(b->tensors[i].second))
        << a->tensors[i].first;
  }
  std::remove(path.c_str());
  std::remove(again.c_str());
}

}  // namespace
}  // namespace stepjit
