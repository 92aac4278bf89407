// DataLoader with pin_memory and a CUDA device: batches arrive pinned, or on
// the device one copy ahead of the consumer, with exactly the values (and
// order) the plain CPU loader delivers.
#include "training/data/dataloader.h"

#include <vector>

#include "devices/cuda/memory/pinned_pool.h"
#include "gtest/gtest.h"
#include "runtime/ops.h"
#include "tests/cuda/cuda_test_backend.h"

namespace stepjit {
namespace {

using test::CudaTest;
using test::Values;

data::Dataset MakeData() {
  Generator g(3);
  return data::Dataset(rand({103, 6}, {}, &g), randint(0, 4, {103}, {.dtype = DType::kI64}, &g));
}

TEST_F(CudaTest, PinnedAndDeviceBatchesEqualTheCpuLoadersBatches) {
  const data::Dataset d = MakeData();
  for (int workers : {0, 2}) {
    const data::DataLoaderOptions base{.batch_size = 16, .shuffle = true, .seed = 9,
                                       .num_workers = workers};
    data::DataLoaderOptions pinned = base, on_device = base;
    pinned.pin_memory = true;
    on_device.pin_memory = true;
    on_device.device = Device::cuda(0);
    data::DataLoader plain(d, base), pin(d, pinned), dev(d, on_device);
    std::vector<data::Batch> expected;
    for (data::Batch& b : plain) expected.push_back(b);
    ASSERT_EQ(expected.size(), 7u);
    size_t k = 0;
    for (data::Batch& b : pin) {
      ASSERT_LT(k, expected.size());
      EXPECT_TRUE(b.x.is_pinned() && b.y.is_pinned()) << "batch " << k;
      EXPECT_EQ(Values(b.x), Values(expected[k].x)) << "batch " << k;
      ++k;
    }
    EXPECT_EQ(k, expected.size());
    k = 0;
    for (data::Batch& b : dev) {
      ASSERT_LT(k, expected.size());
      EXPECT_TRUE(b.x.device().is_cuda() && b.y.device().is_cuda()) << "batch " << k;
      // Work queued by the consumer sees the finished copy.
      EXPECT_EQ(Values(b.x * 2.0), Values(expected[k].x * 2.0)) << "batch " << k;
      EXPECT_EQ(Values(b.y), Values(expected[k].y)) << "batch " << k;
      ++k;
    }
    EXPECT_EQ(k, expected.size()) << workers << " workers";
  }
}

TEST_F(CudaTest, BreakingOutOfADeviceEpochIsClean) {
  data::DataLoader dev(MakeData(), {.batch_size = 10, .pin_memory = true,
                                    .device = Device::cuda(0)});
  int seen = 0;
  for (data::Batch& b : dev) {
    EXPECT_EQ(b.x.shape()[0], 10);
    if (++seen == 2) break;
  }
  EXPECT_EQ(seen, 2);
  // The next epoch starts afresh.
  int all = 0;
  for (data::Batch& b : dev) all += static_cast<int>(b.x.shape()[0]);
  EXPECT_EQ(all, 103);
}

TEST_F(CudaTest, PinnedBlocksAreReusedOnceTheirCopiesAreDone) {
  // Page-locking is slow and synchronizes a GPU: a loader's pinned batches
  // come from a cache, so two epochs page-lock only a few blocks.
  const auto before = runtime::cuda::GetPinnedStats();
  data::DataLoader dev(MakeData(), {.batch_size = 16, .num_workers = 2, .pin_memory = true,
                                    .device = Device::cuda(0)});
  int batches = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (data::Batch& b : dev) {
      EXPECT_EQ(b.x.shape()[1], 6);
      ++batches;
    }
  }
  EXPECT_EQ(batches, 14);
  const auto after = runtime::cuda::GetPinnedStats();
  // The x and y of 14 batches each come from the cache or are page-locked;
  // how many copies are still in flight when a block is wanted (so how many
  // hits) depends on the machine's load, but fewer than 16 are page-locked.
  const int64_t hits = after.cache_hits - before.cache_hits;
  const int64_t allocs = after.backend_allocs - before.backend_allocs;
  EXPECT_EQ(hits + allocs, 28);
  EXPECT_LT(allocs, 16);
  // A freed block whose copy has finished is handed out again.
  Tensor a = ones({300000}).pin_memory();  // the 2 MiB bin: no other block there
  void* block = a.storage()->data();
  Tensor d = a.to(Device::cuda(0), /*non_blocking=*/true);
  a = Tensor();
  ASSERT_TRUE(runtime::cuda::GetBackend()->SynchronizeDevice().ok());
  Tensor b = ones({300000}).pin_memory();
  EXPECT_EQ(b.storage()->data(), block);
  EXPECT_EQ(Values(d), std::vector<double>(300000, 1.0));
}

}  // namespace
}  // namespace stepjit
