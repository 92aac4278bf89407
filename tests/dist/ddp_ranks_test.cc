// Data-parallel training across ranks (run by ctest under `mpirun -np 2`):
// each rank trains a DDP-wrapped MLP on its DistributedSampler shard (64
// samples a step) and, beside it, the same MLP unwrapped on the whole
// 128-sample batch the ranks share out, which is what DDP must reproduce.
//
// Checked after every one of 20 steps, eager and compiled, with SGD +
// momentum and AdamW, with clip_grad_norm_ engaged, with and without loss
// scaling (amp::GradScaler):
//   * every rank holds bit-identical parameters (all_gather, memcmp);
//   * DDP's parameters equal the single-process reference within
//     |ddp - ref| <= 1e-5 * max(1, |ref|) elementwise (the two compute the
//     batch mean in different orders: one mean of 128 against the average of
//     two means of 64, a few ulps per step, here over 20 steps);
//   * with clipping, the norm DDP's clip_grad_norm_ measures is the global
//     one: the reference's full-batch norm within 1e-5 relative.
// Also runs as a world of one without mpirun (the shard is then the batch).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "training/data/distributed_sampler.h"
#include "training/nn/ddp.h"

namespace stepjit {
namespace {

constexpr int64_t kPerRank = 64;
constexpr int kSteps = 20;
constexpr double kMaxNorm = 0.1;

data::Dataset MakeDataset(int64_t n) {
  Generator gen(2024);  // the same data on every rank
  return data::Dataset(randn({n, 24}, {}, &gen),
                       randint(0, 6, {n}, {.dtype = DType::kI64}, &gen));
}

nn::Sequential MakeModel() {
  nn::Sequential model(nn::Linear(24, 48), nn::Tanh(), nn::Linear(48, 48),
                       nn::Tanh(), nn::Linear(48, 6));
  return model;
}

Tensor Flat(const std::vector<Tensor>& params) {
  std::vector<Tensor> pieces;
  for (const Tensor& p : params)
    pieces.push_back(p.detach().reshape({p.numel()}));
  return cat(pieces, 0);
}

enum class OptKind { kSgd, kAdamW };

std::unique_ptr<optim::Optimizer> MakeOptimizer(OptKind kind,
                                                std::vector<Tensor> params) {
  if (kind == OptKind::kSgd) {
    return std::make_unique<optim::SGD>(
        std::move(params), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  }
  return std::make_unique<optim::AdamW>(std::move(params),
                                        optim::AdamWOptions{.lr = 3e-3});
}

struct Case {
  OptKind opt;
  bool clip;
  Mode mode;
  // Loss scaling (amp::GradScaler, f32): DDP averages the scaled gradients,
  // the scaler unscales the averages (and clips after unscale_).
  bool scaler = false;
};

class DdpRanksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dist::init(); }
};

void TrainAndCompare(const Case& c) {
  const int world = dist::world_size();
  const int64_t global_batch = kPerRank * world;
  const data::Dataset dataset = MakeDataset(global_batch * kSteps);

  // Different seeds per rank before the broadcast: DDP's construction must
  // make them equal (to rank 0's, which the reference copies).
  manual_seed(100 + dist::rank());
  nn::Sequential local = MakeModel();
  nn::DistributedDataParallel ddp(local, {.bucket_cap_mb = 0.01});
  manual_seed(100);
  nn::Sequential reference = MakeModel();
  ASSERT_EQ(Flat(reference.parameters()).to_vector<float>(),
            Flat(local.parameters()).to_vector<float>())
      << "rank " << dist::rank()
      << ": the construction broadcast did not give rank 0's values";

  auto sampler = std::make_shared<data::DistributedSampler>(
      dataset.size(), data::DistributedSamplerOptions{.seed = 9});
  data::DataLoader shard(dataset, {.batch_size = kPerRank, .sampler = sampler});
  // The same permutation, unsplit: batch k is the union of the ranks' batch k.
  data::DataLoader whole(
      dataset, {.batch_size = global_batch, .shuffle = true, .seed = 9});
  ASSERT_EQ(shard.num_batches(), kSteps);
  ASSERT_EQ(whole.num_batches(), kSteps);

  auto opt = MakeOptimizer(c.opt, ddp->parameters());
  auto ref_opt = MakeOptimizer(c.opt, reference.parameters());
  Tensor norm;
  amp::GradScaler scaler, ref_scaler;
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss = nn::functional::cross_entropy(ddp(x), y);
    if (c.scaler) {
      scaler.scale(loss).backward();
      scaler.unscale_(*opt);
    } else {
      loss.backward();
    }
    if (c.clip)
      norm.copy_(nn::utils::clip_grad_norm_(ddp->parameters(), kMaxNorm));
    if (c.scaler) {
      scaler.step(*opt);
      scaler.update();
    } else {
      opt->step();
    }
    return loss;
  };
  norm = zeros({});
  MarkOwnedState(norm);
  auto compiled = compile(step, {.mode = c.mode});

  int clipped_steps = 0;
  auto it = whole.begin();
  int k = 0;
  for (data::Batch& b : shard) {
    SCOPED_TRACE(::testing::Message()
                 << "step " << k << " rank " << dist::rank());
    compiled(b.x, b.y);

    ref_opt->zero_grad();
    const Tensor ref_loss =
        nn::functional::cross_entropy(reference(it->x), it->y);
    if (c.scaler) {
      ref_scaler.scale(ref_loss).backward();
      ref_scaler.unscale_(*ref_opt);
    } else {
      ref_loss.backward();
    }
    if (c.clip) {
      const double ref_norm =
          nn::utils::clip_grad_norm_(reference.parameters(), kMaxNorm).item();
      EXPECT_NEAR(norm.item(), ref_norm, 1e-5 * ref_norm);
      if (ref_norm > kMaxNorm) ++clipped_steps;
    }
    if (c.scaler) {
      ref_scaler.step(*ref_opt);
      ref_scaler.update();
    } else {
      ref_opt->step();
    }

    const Tensor mine = Flat(ddp->parameters());
    const std::vector<float> got = mine.to_vector<float>();
    const std::vector<float> want =
        Flat(reference.parameters()).to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::fabs(got[i] - want[i]),
                1e-5 * std::max(1.0f, std::fabs(want[i])))
          << "parameter element " << i << ": ddp " << got[i] << ", reference "
          << want[i];
    }
    const std::vector<float> all = dist::all_gather(mine).to_vector<float>();
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(std::memcmp(all.data() + r * got.size(), got.data(),
                            got.size() * sizeof(float)),
                0)
          << "rank " << r << " holds different parameters";
    }
    ++it;
    ++k;
  }
  EXPECT_EQ(k, kSteps);
  if (c.clip) {
    EXPECT_GT(clipped_steps, kSteps / 2) << "max_norm never engaged";
  }
  if (c.mode == Mode::kCompiled) {
    const CompileStats s = compiled.stats();
    EXPECT_EQ(s.replays, kSteps - 2) << compiled.explain();
    EXPECT_EQ(s.verify_mismatches, 0) << compiled.explain();
    std::ostringstream ir;
    compiled.dump_ir(ir);
    EXPECT_NE(ir.str().find("all_reduce"), std::string::npos) << ir.str();
  }
}

TEST_F(DdpRanksTest, EagerSgdMomentum) {
  TrainAndCompare({OptKind::kSgd, false, Mode::kEager});
}
TEST_F(DdpRanksTest, EagerAdamWClipped) {
  TrainAndCompare({OptKind::kAdamW, true, Mode::kEager});
}
TEST_F(DdpRanksTest, CompiledSgdMomentumClipped) {
  TrainAndCompare({OptKind::kSgd, true, Mode::kCompiled});
}
TEST_F(DdpRanksTest, EagerAdamWGradScalerClipped) {
  TrainAndCompare({OptKind::kAdamW, true, Mode::kEager, /*scaler=*/true});
}
TEST_F(DdpRanksTest, CompiledSgdMomentumGradScalerClipped) {
  TrainAndCompare({OptKind::kSgd, true, Mode::kCompiled, /*scaler=*/true});
}
TEST_F(DdpRanksTest, CompiledAdamW) {
  TrainAndCompare({OptKind::kAdamW, false, Mode::kCompiled});
}

// A branch used on rank 1 only: rank 0's trunk gradients are ready before
// the side branch's bucket, which it never fills. Buckets must still launch
// in plan order on every rank (the sizes differ, so another order would
// mismatch), and each gradient must be the average of what the ranks hold
// (zeros on rank 0 for the side branch): compared bit for bit with a plain
// copy's local gradients averaged one tensor at a time.
struct Branchy : nn::Module {
  Branchy() {
    trunk = register_module("trunk", nn::Linear(8, 12));
    side = register_module("side", nn::Linear(12, 12, /*bias=*/false));
    head = register_module("head", nn::Linear(12, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = tanh(trunk(x));
    if (use_side) h = h + tanh(side(h));
    return head(h);
  }
  bool use_side = true;
  nn::Linear trunk = nullptr, side = nullptr, head = nullptr;
};

TEST_F(DdpRanksTest, BranchUsedOnOneRankOnly) {
  manual_seed(5);
  auto wrapped = std::make_shared<Branchy>();
  manual_seed(5);
  Branchy plain;
  wrapped->use_side = plain.use_side =
      dist::rank() != 0 || dist::world_size() == 1;
  // A cap below every gradient: one bucket per parameter.
  nn::DistributedDataParallel ddp(wrapped, {.bucket_cap_mb = 1e-6});
  ASSERT_EQ(ddp->buckets().size(), 5u);
  Generator gen(40 + dist::rank());
  const Tensor x = randn({16, 8}, {}, &gen);
  const Tensor y = randint(0, 3, {16}, {.dtype = DType::kI64}, &gen);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(::testing::Message()
                 << "round " << round << " rank " << dist::rank());
    ddp->zero_grad();
    plain.zero_grad();
    nn::functional::cross_entropy(ddp(x), y).backward();
    nn::functional::cross_entropy(plain.forward(x), y).backward();
    const auto a = wrapped->parameters(), b = plain.parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      const Tensor local =
          b[i].grad().defined() ? b[i].grad() : zeros_like(b[i]);
      const Tensor want = dist::all_reduce(local, dist::ReduceOp::kAvg);
      ASSERT_TRUE(a[i].grad().defined()) << "parameter " << i;
      EXPECT_EQ(a[i].grad().contiguous().to_vector<float>(),
                want.to_vector<float>())
          << "parameter " << i;
    }
  }
  EXPECT_EQ(ddp->num_syncs(), 10);
}

// Gradient accumulation: each rank runs its 64 samples as two micro-batches
// of 32, the first under no_sync() (no communication), each loss halved.
// After the second backward the gradients are the average over ranks of the
// 64-sample means: the reference's full-batch gradients, within
// |ddp - ref| <= 1e-5 |ref| + 1e-7 (summation order differs).
TEST_F(DdpRanksTest, NoSyncMicroBatchesMatchTheFullBatch) {
  const int world = dist::world_size();
  const data::Dataset dataset = MakeDataset(kPerRank * world);
  manual_seed(100);
  nn::Sequential local = MakeModel();
  nn::DistributedDataParallel ddp(local);
  manual_seed(100);
  nn::Sequential reference = MakeModel();
  std::vector<int64_t> mine;
  for (int64_t i = dist::rank() * kPerRank; i < (dist::rank() + 1) * kPerRank;
       ++i) {
    mine.push_back(i);
  }
  const data::Batch shard = dataset.Get(mine);
  const int64_t half = kPerRank / 2;
  {
    auto no_sync = ddp->no_sync();
    (nn::functional::cross_entropy(ddp(shard.x.slice(0, 0, half)),
                                   shard.y.slice(0, 0, half)) *
     0.5)
        .backward();
  }
  const int64_t syncs = ddp->num_syncs();
  EXPECT_EQ(syncs, 0);
  (nn::functional::cross_entropy(ddp(shard.x.slice(0, half, kPerRank)),
                                 shard.y.slice(0, half, kPerRank)) *
   0.5)
      .backward();
  EXPECT_EQ(ddp->num_syncs(), static_cast<int64_t>(ddp->buckets().size()));
  nn::functional::cross_entropy(reference(dataset.inputs()), dataset.targets())
      .backward();
  const auto a = local.parameters(), b = reference.parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> got = a[i].grad().contiguous().to_vector<float>();
    const std::vector<float> want = b[i].grad().contiguous().to_vector<float>();
    for (size_t j = 0; j < got.size(); ++j) {
      ASSERT_LE(std::fabs(got[j] - want[j]), 1e-5 * std::fabs(want[j]) + 1e-7)
          << "parameter " << i << "[" << j << "]: ddp " << got[j]
          << ", reference " << want[j];
    }
  }
}

}  // namespace
}  // namespace stepjit
