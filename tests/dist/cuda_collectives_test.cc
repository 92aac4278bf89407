// Collectives of CUDA tensors on the host emulator on every rank of the job
// (alone, and under `mpirun -np 2`): a world of one takes the local path;
// more ranks stage through the host to the core's MPI collectives (the
// emulator has no device NCCL could use). Expected values are computed here
// from the rank-dependent inputs in double.
#include <cmath>
#include <string>
#include <vector>

#include "devices/cuda/backend.h"
#include "devices/cuda/kernels/collective_ops.h"
#include "devices/cuda/nccl/dist_nccl.h"
#include "dist/dist.h"
#include "dist/dist_internal.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "testing/cuda_emulator/emulator_backend.h"
#include "training/nn/ddp.h"

namespace stepjit {
namespace {

const Device kCuda = Device::cuda(0);

class CudaCollectives : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dist::init();
    runtime::cuda::SetBackend(runtime::cuda::MakeEmulatorBackend());
  }
  int rank() const { return dist::rank(); }
  int world() const { return dist::world_size(); }
};

std::vector<double> Values(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::kF64).contiguous().to_vector<double>();
}

// x[i] = (rank + 1) * (i + 1) on this rank, on the emulated device.
Tensor RankTensor(int rank, int64_t n, DType dtype) {
  Tensor t = empty({n}, {.dtype = DType::kF64});
  for (int64_t i = 0; i < n; ++i) t.data<double>()[i] = (rank + 1) * (i + 1.0);
  return t.to(dtype).to(kCuda);
}

TEST_F(CudaCollectives, PathFollowsTheWorld) {
  EXPECT_EQ(runtime::cuda::ChooseCollectivePath().path,
            world() == 1 ? runtime::cuda::CollectivePath::kLocal
                         : runtime::cuda::CollectivePath::kHostStaging);
}

// How NCCL's unique id reaches the ranks of an MPI launch.
TEST_F(CudaCollectives, BroadcastBytesCarriesRankZerosUniqueId) {
  if (!dist::internal::HasMpi()) GTEST_SKIP() << "a world of one without MPI";
  unsigned char id[128];
  for (int i = 0; i < 128; ++i) {
    id[i] = static_cast<unsigned char>(rank() == 0 ? (i * 37 + 11) & 0xff : 0);
  }
  dist::internal::BroadcastBytes(id, sizeof(id), 0);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(id[i], (i * 37 + 11) & 0xff) << i;
}

TEST_F(CudaCollectives, AllReduceBroadcastAllGather) {
  const int64_t n = 9;
  const double ranks_sum = world() * (world() + 1) / 2.0;
  const auto before = runtime::cuda::GetCollectiveStats();
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
    SCOPED_TRACE(ir::DTypeName(dtype));
    const Tensor x = RankTensor(rank(), n, dtype);
    const std::vector<double> s =
        Values(dist::all_reduce(x, dist::ReduceOp::kSum));
    const std::vector<double> a =
        Values(dist::all_reduce(x, dist::ReduceOp::kAvg));
    const std::vector<double> m =
        Values(dist::all_reduce(x, dist::ReduceOp::kMax));
    const Tensor b = dist::broadcast(x, world() - 1);
    const Tensor g = dist::all_gather(x);
    EXPECT_TRUE(b.device().is_cuda() && g.device().is_cuda());
    ASSERT_EQ(g.numel(), n * world());
    const std::vector<double> bv = Values(b), gv = Values(g);
    for (int64_t i = 0; i < n; ++i) {
      // bf16 keeps 8 bits: inputs and results round (relative 2^-8 each).
      const double rel = dtype == DType::kBF16 ? 1.6e-2 : 1e-6;
      const double want_sum = ranks_sum * (i + 1.0);
      EXPECT_NEAR(s[i], want_sum, rel * want_sum) << i;
      EXPECT_NEAR(a[i], want_sum / world(), rel * want_sum) << i;
      EXPECT_NEAR(m[i], world() * (i + 1.0), rel * world() * (i + 1.0)) << i;
      EXPECT_NEAR(bv[i], world() * (i + 1.0), rel * world() * (i + 1.0)) << i;
      for (int r = 0; r < world(); ++r) {
        EXPECT_NEAR(gv[r * n + i], (r + 1) * (i + 1.0),
                    rel * (r + 1) * (i + 1.0))
            << r << "," << i;
      }
    }
  }
  const auto after = runtime::cuda::GetCollectiveStats();
  if (world() == 1) {
    EXPECT_EQ(after.local - before.local, 15);
  } else {
    EXPECT_EQ(after.host_staged - before.host_staged, 15);
  }
}

// Five steps of data-parallel training beside its single-process
// reference: every rank draws the same full batch (per_rank rows per rank,
// seed + step), runs `step` on the emulated device with its own rows, and
// the CPU `reference` trains on the whole batch.
struct ShardedBatches {
  int64_t per_rank;
  int64_t features;
  int64_t classes;
  uint64_t seed;
};
template <typename Step>
void TrainShardsAndFullBatch(Step& step, nn::Sequential& reference,
                             optim::Optimizer& ref_opt,
                             const ShardedBatches& b) {
  const int64_t rank = dist::rank(), world = dist::world_size();
  for (int it = 0; it < 5; ++it) {
    Generator gen(b.seed + it);
    const Tensor xs = randn({b.per_rank * world, b.features}, {}, &gen);
    const Tensor ys = randint(0, b.classes, {b.per_rank * world},
                              {.dtype = DType::kI64}, &gen);
    const Tensor x =
        xs.slice(0, rank * b.per_rank, (rank + 1) * b.per_rank).contiguous();
    const Tensor y =
        ys.slice(0, rank * b.per_rank, (rank + 1) * b.per_rank).contiguous();
    step(x.to(kCuda), y.to(kCuda));
    ref_opt.zero_grad();
    cross_entropy(reference(xs), ys).backward();
    ref_opt.step();
  }
}

// A data-parallel step compiled on the emulated device: each rank trains on
// its own batch and averages gradients, so every rank's parameters stay
// equal and match one eager CPU model trained on the ranks' mean gradient
// (the same step run with every rank's batch concatenated: cross_entropy
// averages over the batch).
TEST_F(CudaCollectives, CompiledDataParallelStepMatchesTheFullBatch) {
  auto make = [](Device d) {
    manual_seed(5);
    nn::Sequential m(nn::Linear(6, 8), nn::Tanh(), nn::Linear(8, 3));
    m->to(d);
    return m;
  };
  nn::Sequential model = make(kCuda), reference = make(Device::cpu());
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  optim::SGD ref_opt(reference.parameters(), {.lr = 0.1});
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    for (Tensor& p : model.parameters()) {
      Tensor g = p.grad();
      dist::all_reduce_(g, dist::ReduceOp::kAvg);
    }
    opt.step();
    return loss;
  };
  auto fast = compile(step);
  TrainShardsAndFullBatch(
      fast, reference, ref_opt,
      {.per_rank = 4, .features = 6, .classes = 3, .seed = 100});
  auto p = model.parameters(), q = reference.parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    const std::vector<double> a = Values(p[i]), b = Values(q[i]);
    for (size_t j = 0; j < a.size(); ++j) {
      // f32 sums in other orders (per-rank halves, then the average): 1e-5.
      EXPECT_NEAR(a[j], b[j], 1e-5 * std::abs(b[j]) + 1e-6)
          << "parameter " << i << "[" << j << "]";
    }
  }
  const std::string explain = fast.explain();
  if (world() == 1) {
    EXPECT_NE(explain.find("replayed as a CUDA graph"), std::string::npos)
        << explain;
  } else {
    EXPECT_NE(explain.find("no CUDA graph: all_reduce on CUDA tensors copies "
                           "through the host"),
              std::string::npos)
        << explain;
  }
}

// nn::DistributedDataParallel on the emulated device: its buckets' async
// all_reduce of CUDA gradients (local or host-staged) inside a compiled
// step, against one CPU model trained on the full batch.
TEST_F(CudaCollectives, DistributedDataParallelOnCudaMatchesTheFullBatch) {
  auto make = [](Device d) {
    manual_seed(8);
    nn::Sequential m(nn::Linear(5, 7), nn::ReLU(), nn::Linear(7, 2));
    m->to(d);
    return m;
  };
  nn::Sequential local = make(kCuda), reference = make(Device::cpu());
  nn::DistributedDataParallel ddp(local, {.bucket_cap_mb = 0.0001});
  optim::AdamW opt(ddp->parameters(), {.lr = 1e-2});
  optim::AdamW ref_opt(reference.parameters(), {.lr = 1e-2});
  auto fast = compile([&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(ddp(x), y);
    loss.backward();
    opt.step();
    return loss;
  });
  TrainShardsAndFullBatch(
      fast, reference, ref_opt,
      {.per_rank = 3, .features = 5, .classes = 2, .seed = 200});
  auto p = local.parameters(), q = reference.parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_TRUE(p[i].device().is_cuda());
    const std::vector<double> a = Values(p[i]), b = Values(q[i]);
    for (size_t j = 0; j < a.size(); ++j) {
      // AdamW normalizes the update, so f32 rounding of the averaged
      // gradient moves parameters by at most ~1e-5 of lr-sized steps.
      EXPECT_NEAR(a[j], b[j], 1e-4 * std::abs(b[j]) + 1e-5)
          << "parameter " << i << "[" << j << "]";
    }
  }
}

}  // namespace
}  // namespace stepjit
