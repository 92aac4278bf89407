// The device runtime registry (runtime/device_runtime.h): every op that is
// not a view has a kernel on every device, lookups of missing kernels and
// device-to-device transfers give clear errors or route through the host,
// and storage and pinned memory come from the runtime of their device with
// the host accounting intact.
#include "runtime/device_runtime.h"

#include <vector>

#include "devices/cpu/device_runtime.h"
#include "gtest/gtest.h"
#include "ir/op.h"
#include "runtime/ops.h"
#include "runtime/storage.h"
#include "runtime/tensor.h"
#include "tests/util/expect_error.h"

namespace stepjit::runtime {
namespace {

TEST(DeviceRuntimeTest, EveryOpButViewsHasAKernelOnEveryDevice) {
  for (DeviceType type : {DeviceType::kCPU, DeviceType::kCUDA}) {
    const DeviceRuntime& rt = GetDeviceRuntime(type);
    ASSERT_NE(rt.copy_into, nullptr) << rt.name;
    ASSERT_NE(rt.allocate, nullptr) << rt.name;
    ASSERT_NE(rt.release, nullptr) << rt.name;
    for (int i = 0; i < ir::kNumOps; ++i) {
      const auto op = static_cast<ir::OpId>(i);
      if (ir::GetOpInfo(op).kind == ir::OpKind::kView) continue;
      EXPECT_NE(rt.kernels[i], nullptr)
          << rt.name << " has no kernel for " << ir::OpName(op);
    }
  }
  EXPECT_STREQ(GetDeviceRuntime(DeviceType::kCPU).name, "cpu");
  EXPECT_STREQ(GetDeviceRuntime(DeviceType::kCUDA).name, "cuda");
  // Only an accelerator offers page-locked host memory or transfers.
  EXPECT_EQ(GetDeviceRuntime(DeviceType::kCPU).transfer, nullptr);
  EXPECT_EQ(GetDeviceRuntime(DeviceType::kCPU).allocate_pinned, nullptr);
  EXPECT_EQ(PinnedMemoryRuntime(), &GetDeviceRuntime(DeviceType::kCUDA));
}

TEST(DeviceRuntimeTest, AViewHasNoKernelAndTheLookupSaysWhere) {
  test::ExpectError([] { GetKernel(ir::OpId::kReshape, Device::cpu()); },
                    {"reshape", "no kernel on cpu"});
  EXPECT_EQ(GetKernel(ir::OpId::kAdd, Device::cpu()),
            GetDeviceRuntime(DeviceType::kCPU)
                .kernels[static_cast<int>(ir::OpId::kAdd)]);
}

TEST(DeviceRuntimeTest, TransferToTheSameDeviceIsTheTensorItself) {
  Tensor t = from_vector(std::vector<float>{1.0f, 2.0f, 3.0f}, {3});
  Tensor same = TransferTensor(t, Device::cpu());
  EXPECT_EQ(same.storage(), t.storage());
}

TEST(DeviceRuntimeTest, CpuStorageIsCountedWhileItLives) {
  const MemoryStats before = GetCpuMemoryStats();
  {
    Storage s(1000, Device::cpu());
    ASSERT_NE(s.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data()) % 64, 0u);
    const MemoryStats during = GetCpuMemoryStats();
    EXPECT_EQ(during.allocated_bytes - before.allocated_bytes, 1000);
    EXPECT_EQ(during.num_allocs - before.num_allocs, 1);
    EXPECT_GE(during.peak_bytes, during.allocated_bytes);
  }
  EXPECT_EQ(GetCpuMemoryStats().allocated_bytes, before.allocated_bytes);
}

// Freed large blocks are reused for the next tensor of their size class
// (no page faults each step), counted as freed all the same, and handed back
// to the system on request; small ones are not kept.
TEST(DeviceRuntimeTest, LargeCpuBlocksAreCachedForReuseAndReleasable) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "no block cache under AddressSanitizer";
#endif
  runtime::cpu::ReleaseCachedHostMemory();
  EXPECT_EQ(runtime::cpu::CachedHostBytes(), 0);
  const int64_t live = GetCpuMemoryStats().allocated_bytes;
  const void* first;
  {
    Tensor a = ones({1 << 18});  // 1 MiB
    first = a.data_ptr();
  }
  EXPECT_EQ(GetCpuMemoryStats().allocated_bytes, live);  // freed for the stats
  EXPECT_GE(runtime::cpu::CachedHostBytes(), int64_t{1} << 20);
  {
    Tensor b = full({(1 << 18) - 100}, 2.0);  // same size class: same block
    EXPECT_EQ(b.data_ptr(), first);
    EXPECT_EQ(runtime::cpu::CachedHostBytes(), 0);
    EXPECT_EQ(sum(b).item(), 2.0 * ((1 << 18) - 100));  // written afresh
  }
  { Tensor small = ones({1000}); }
  EXPECT_GE(runtime::cpu::CachedHostBytes(), int64_t{1} << 20);
  EXPECT_LT(runtime::cpu::CachedHostBytes(), (int64_t{1} << 20) + (1 << 17));
  runtime::cpu::ReleaseCachedHostMemory();
  EXPECT_EQ(runtime::cpu::CachedHostBytes(), 0);
}

TEST(DeviceRuntimeTest, DispatchRunsTheCpuKernelOfTheTable) {
  Tensor a = from_vector(std::vector<float>{1.0f, -2.0f, 3.5f}, {3});
  Tensor b = from_vector(std::vector<float>{0.5f, 4.0f, -1.0f}, {3});
  std::vector<float> got = (a * b).to_vector<float>();
  EXPECT_EQ(got, (std::vector<float>{0.5f, -8.0f, -3.5f}));
}

TEST(DeviceRuntimeTest, PinnedStorageOfACudaDeviceIsRefused) {
  test::ExpectError([] { Storage s(64, Device::cuda(0), /*pinned=*/true); },
                    {"pinned memory is host memory", "cuda:0"});
}

}  // namespace
}  // namespace stepjit::runtime
