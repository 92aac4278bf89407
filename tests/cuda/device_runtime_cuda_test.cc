// The CUDA device runtime through the registry, on the test backend (the
// host emulator unless STEPJIT_TEST_CUDA_BACKEND=driver): storage, copies
// both ways, kernels through Dispatch, pinned host memory counted as host
// memory; each op's device path chosen from the op table.
#include <vector>

#include "devices/cuda/ops.h"
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

// Every op of the table has a device path or is a view: none makes a host
// round trip for every call. The paths of the elementwise, fused-reduction
// and row-reduction rows come from their flags, so a new row with one of
// those gets a path without an edit here or in runtime/cuda.
TEST(CudaDevicePathsTest, EveryOpOfTheTableRunsOnTheDevice) {
  const cuda::DevicePaths& paths = cuda::GetDevicePaths();
  for (int i = 0; i < ir::kNumOps; ++i) {
    const ir::OpId op = static_cast<ir::OpId>(i);
    EXPECT_TRUE(cuda::RunsOnDevice(op)) << ir::OpName(op);
    EXPECT_EQ(paths[i] == nullptr, ir::IsView(op)) << ir::OpName(op);
  }
  // Ops sharing one rule share one path: the generated kernels.
  auto path = [&](ir::OpId op) { return paths[static_cast<int>(op)]; };
  EXPECT_EQ(path(ir::OpId::kSilu), path(ir::OpId::kAdd));
  EXPECT_EQ(path(ir::OpId::kAmax), path(ir::OpId::kAdd));
  EXPECT_EQ(path(ir::OpId::kAddcdivInplace), path(ir::OpId::kAdd));
  EXPECT_EQ(path(ir::OpId::kSoftmax), path(ir::OpId::kCrossEntropy));
  // var's hand-written kernel replaces the generated row path.
  EXPECT_NE(path(ir::OpId::kVar), path(ir::OpId::kSoftmax));
}

// A path declines operand forms it does not cover, and the op then runs on
// the host, counted, with the CPU's result: log_softmax over a non-last dim
// goes through a permuted copy on the device; argmax of an integer tensor
// is declined by its kernel.
TEST_F(DeviceRuntimeCudaTest, DeclinedFormsRunOnTheHostAndAreCounted) {
  const std::vector<float> xs = {0.5f, -1.0f, 2.0f, 3.0f, 0.25f, -4.0f};
  const Tensor hx = from_vector(xs, {2, 3});
  const Tensor dx = hx.to(Device::cuda(0));
  const int64_t before = cuda::GetEagerStats().host_fallbacks;
  const Tensor over_rows = log_softmax(dx, 0);
  EXPECT_EQ(cuda::GetEagerStats().host_fallbacks, before)
      << cuda::HostFallbackSummary();
  const std::vector<float> want = log_softmax(hx, 0).to_vector<float>();
  const std::vector<float> got = over_rows.to(Device::cpu()).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6) << i;

  const Tensor ints =
      from_vector(std::vector<int64_t>{3, 9, 1, 4, 2, 8}, {2, 3},
                  {.dtype = DType::kI64, .device = Device::cuda(0)});
  const Tensor am = argmax(ints, 1);
  EXPECT_EQ(cuda::GetEagerStats().host_fallbacks, before + 1);
  EXPECT_EQ(am.to(Device::cpu()).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 2}));
}

}  // namespace
}  // namespace stepjit::runtime
