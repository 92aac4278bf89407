// The CUDA device runtime through the registry, on the test backend (the
// host emulator unless STEPJIT_TEST_CUDA_BACKEND=driver): storage, copies
// both ways, kernels through Dispatch, pinned host memory counted as host
// memory.
#include <vector>

#include "gtest/gtest.h"
#include "runtime/device_runtime.h"
#include "runtime/ops.h"
#include "runtime/storage.h"
#include "runtime/tensor.h"
#include "tests/cuda/cuda_test_backend.h"

namespace stepjit::runtime {
namespace {

class DeviceRuntimeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = test::EnsureCudaTestBackend();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

TEST_F(DeviceRuntimeCudaTest, TransfersRoundTripThroughTheCudaRuntime) {
  Tensor h = from_vector(std::vector<float>{1.5f, -2.0f, 3.25f, 8.0f}, {2, 2});
  Tensor d = TransferTensor(h, Device::cuda(0));
  EXPECT_EQ(d.device(), Device::cuda(0));
  EXPECT_NE(d.storage(), h.storage());
  Tensor back = TransferTensor(d, Device::cpu());
  EXPECT_EQ(back.device(), Device::cpu());
  EXPECT_EQ(back.to_vector<float>(), h.to_vector<float>());
}

TEST_F(DeviceRuntimeCudaTest, DispatchRunsTheCudaKernel) {
  Tensor a = from_vector(std::vector<float>{1.0f, 2.0f, 3.0f}, {3},
                         {.device = Device::cuda(0)});
  Tensor b = from_vector(std::vector<float>{4.0f, -5.0f, 0.5f}, {3},
                         {.device = Device::cuda(0)});
  Tensor c = a + b;
  EXPECT_EQ(c.device(), Device::cuda(0));
  EXPECT_EQ(c.to(Device::cpu()).to_vector<float>(),
            (std::vector<float>{5.0f, -3.0f, 3.5f}));
}

TEST_F(DeviceRuntimeCudaTest, DeviceStorageIsNotHostMemoryButPinnedStorageIs) {
  const MemoryStats before = GetCpuMemoryStats();
  {
    Storage d(4096, Device::cuda(0));
    ASSERT_NE(d.data(), nullptr);
    EXPECT_EQ(GetCpuMemoryStats().allocated_bytes, before.allocated_bytes);
    Storage p(4096, Device::cpu(), /*pinned=*/true);
    ASSERT_NE(p.data(), nullptr);
    EXPECT_TRUE(p.pinned());
    EXPECT_EQ(GetCpuMemoryStats().allocated_bytes - before.allocated_bytes,
              4096);
  }
  EXPECT_EQ(GetCpuMemoryStats().allocated_bytes, before.allocated_bytes);
}

}  // namespace
}  // namespace stepjit::runtime
