// nn::DistributedDataParallel in one process (a world of one): the bucket
// plan against hand-computed sizes, gradients bit-identical to the unwrapped
// model's (the reduction of one rank returns its input, and copying it back
// must not change a bit), hooks firing per bucket, unused and non-contiguous
// gradients, dtype moves, naming and errors. Several ranks: tests/dist.
#include "training/nn/ddp.h"

#include <limits>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "gtest/gtest.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/dispatch.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "tests/util/expect_error.h"
#include "training/nn/functional.h"
#include "training/nn/layers.h"

namespace stepjit::nn {
namespace {

using Plan = std::vector<std::vector<int>>;

std::vector<double> Values(const Tensor& t) {
  return t.contiguous().to(DType::kF64).to_vector<double>();
}

Plan PlanOf(const DistributedDataParallel& ddp) {
  Plan plan;
  for (const auto& b : ddp->buckets()) plan.push_back(b.params);
  return plan;
}

std::vector<int64_t> BytesOf(const DistributedDataParallel& ddp) {
  std::vector<int64_t> bytes;
  for (const auto& b : ddp->buckets()) bytes.push_back(b.bytes);
  return bytes;
}

// Parameters (in order): 0.weight 128x64, 0.bias 128, 2.weight 32x128,
// 2.bias 32, 3.weight 4x32, 3.bias 4; f32 bytes 32768, 512, 16384, 128,
// 512, 16.
Sequential MakeModel(uint64_t seed = 3) {
  manual_seed(seed);
  return Sequential(Linear(64, 128), ReLU(), Linear(128, 32), Linear(32, 4));
}

class DdpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dist::InitOptions single;
    single.backend = "single";
    dist::init(single);
  }
};

TEST(DdpInitTest, NeedsAnInitializedProcessGroup) {
  if (dist::is_initialized())
    GTEST_SKIP() << "another test of this process initialized dist";
  test::ExpectError([] { DistributedDataParallel ddp(MakeModel()); },
                    {"not initialized", "dist::init() first"});
}

TEST_F(DdpTest, BucketsFollowReverseOrderAndTheCap) {
  // 0.02 MiB = 20971 bytes: 3.bias, 3.weight, 2.bias, 2.weight, 0.bias fill
  // 17552; 0.weight (32768) alone exceeds the cap.
  DistributedDataParallel wide(MakeModel(), {.bucket_cap_mb = 0.02});
  EXPECT_EQ(PlanOf(wide), (Plan{{5, 4, 3, 2, 1}, {0}}));
  EXPECT_EQ(BytesOf(wide), (std::vector<int64_t>{17552, 32768}));
  // 0.01 MiB = 10485 bytes: 2.weight (16384) no longer fits beside the
  // first three and is bigger than the cap, so it stands alone.
  DistributedDataParallel narrow(MakeModel(), {.bucket_cap_mb = 0.01});
  EXPECT_EQ(PlanOf(narrow), (Plan{{5, 4, 3}, {2}, {1}, {0}}));
  EXPECT_EQ(BytesOf(narrow), (std::vector<int64_t>{656, 16384, 512, 32768}));
  DistributedDataParallel one(MakeModel());  // 25 MiB holds everything
  EXPECT_EQ(PlanOf(one), (Plan{{5, 4, 3, 2, 1, 0}}));
}

// One bucket per dtype (a flat tensor has one); frozen parameters are left out.
TEST_F(DdpTest, BucketsGroupByDTypeAndSkipFrozenParameters) {
  struct Mixed : Module {
    Mixed() {
      register_parameter("a", zeros({4}));
      register_parameter("b", zeros({4}, {.dtype = DType::kF64}));
      register_parameter("c", zeros({4}));
      register_parameter("frozen", zeros({4}), /*requires_grad=*/false);
    }
  };
  DistributedDataParallel ddp(std::make_shared<Mixed>());
  EXPECT_EQ(PlanOf(ddp), (Plan{{2, 0}, {1}}));
  EXPECT_EQ(BytesOf(ddp), (std::vector<int64_t>{32, 32}));
}

// Runs forward and backward on the plain model and on a DDP-wrapped copy
// with the same parameters, and compares every gradient bit for bit.
void ExpectSameGradients(Sequential& plain, DistributedDataParallel& ddp,
                         const Tensor& x, const Tensor& y) {
  cross_entropy(plain(x), y).backward();
  cross_entropy(ddp(x), y).backward();
  const auto a = plain.parameters();
  const auto b = ddp->module()->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(b[i].grad().defined()) << "parameter " << i;
    EXPECT_EQ(Values(a[i].grad()), Values(b[i].grad())) << "parameter " << i;
  }
}

TEST_F(DdpTest, GradientsEqualTheUnwrappedModelsAndHooksFirePerBucket) {
  Sequential plain = MakeModel(), wrapped = MakeModel();
  DistributedDataParallel ddp(wrapped, {.bucket_cap_mb = 0.01});
  ASSERT_EQ(ddp->buckets().size(), 4u);
  Generator gen(5);
  const Tensor x = randn({8, 64}, {}, &gen);
  const Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &gen);
  EXPECT_EQ(ddp->num_syncs(), 0);
  ExpectSameGradients(plain, ddp, x, y);
  EXPECT_EQ(ddp->num_syncs(), 4);
  // Without zero_grad the second backward accumulates, as the plain one does.
  ExpectSameGradients(plain, ddp, x * 0.5, y);
  EXPECT_EQ(ddp->num_syncs(), 8);
  // A backward that reaches no parameter reduces nothing.
  Tensor other = randn({3}, {}, &gen).set_requires_grad(true);
  sum(other * other).backward();
  EXPECT_EQ(ddp->num_syncs(), 8);
}

// A .grad the user made non-contiguous keeps its identity and strides; the
// reduced values land in it element by element.
TEST_F(DdpTest, NonContiguousGradsAreReducedInPlace) {
  Sequential plain = MakeModel(), wrapped = MakeModel();
  DistributedDataParallel ddp(wrapped, {.bucket_cap_mb = 0.01});
  const Tensor w = wrapped.parameters()[2];  // 32x128
  const Tensor transposed = zeros({128, 32}).t();
  ASSERT_FALSE(transposed.is_contiguous());
  w.set_grad(transposed);
  Generator gen(6);
  const Tensor x = randn({8, 64}, {}, &gen);
  const Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &gen);
  ExpectSameGradients(plain, ddp, x, y);
  EXPECT_TRUE(w.grad().is_same(transposed));
  EXPECT_FALSE(w.grad().is_contiguous());
}

// A parameter the forward never used still takes part: it contributes what
// its .grad holds (zeros without one) and receives the reduced value.
TEST_F(DdpTest, UnusedParametersContributeAndReceive) {
  struct TwoHeads : Module {
    TwoHeads() {
      used = register_module("used", Linear(6, 3));
      unused = register_module("unused", Linear(6, 3));
    }
    Tensor forward(const Tensor& x) override { return used(x); }
    Linear used = nullptr, unused = nullptr;
  };
  auto model = std::make_shared<TwoHeads>();
  DistributedDataParallel ddp(model);
  const Tensor x = ones({2, 6});
  sum(ddp(x)).backward();
  EXPECT_EQ(ddp->num_syncs(), 1);
  const Tensor unused_weight = model->unused->weight;
  ASSERT_TRUE(unused_weight.grad().defined());
  EXPECT_EQ(Values(unused_weight.grad()), std::vector<double>(18, 0.0));
  EXPECT_EQ(Values(model->used->bias.grad()), std::vector<double>(3, 2.0));
  {
    NoGradGuard no_grad;
    unused_weight.grad().fill_(1.5);
  }
  sum(ddp(x)).backward();
  EXPECT_EQ(Values(unused_weight.grad()), std::vector<double>(18, 1.5));
  EXPECT_EQ(Values(model->used->bias.grad()), std::vector<double>(3, 4.0));
}

// Module::to(dtype) after wrapping changes what the plan grouped by: the
// next backward re-plans and reduces in the new dtype.
TEST_F(DdpTest, ReplansAfterTheModuleChangesDType) {
  Sequential plain = MakeModel(), wrapped = MakeModel();
  DistributedDataParallel ddp(wrapped, {.bucket_cap_mb = 0.01});
  ddp->to(DType::kF64);
  plain.to(DType::kF64);
  Generator gen(7);
  const Tensor x = randn({8, 64}, {.dtype = DType::kF64}, &gen);
  const Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &gen);
  ExpectSameGradients(plain, ddp, x, y);
  // f64 doubles every size: 0.01 MiB now splits differently.
  EXPECT_EQ(PlanOf(ddp), (Plan{{5, 4, 3}, {2}, {1}, {0}}));
  EXPECT_EQ(BytesOf(ddp), (std::vector<int64_t>{1312, 32768, 1024, 65536}));
}

// replace_parameter gives a parameter a new identity: the hooks follow it.
TEST_F(DdpTest, HooksFollowReplacedParameters) {
  Sequential plain = MakeModel(), wrapped = MakeModel();
  DistributedDataParallel ddp(wrapped);
  auto last = std::dynamic_pointer_cast<LinearImpl>(
      wrapped->named_children()[3].second);
  ASSERT_NE(last, nullptr);
  const Tensor old_bias = last->bias;
  last->replace_parameter("bias", old_bias.detach().clone());
  Generator gen(8);
  const Tensor x = randn({8, 64}, {}, &gen);
  const Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &gen);
  ExpectSameGradients(plain, ddp, x, y);
  EXPECT_EQ(ddp->num_syncs(), 1);
  // The old tensor is no longer hooked: a backward into it reduces nothing.
  sum(old_bias * 2.0).backward();
  EXPECT_EQ(ddp->num_syncs(), 1);
}

// A shape-only (meta) backward, as a compiled step's re-trace runs: the
// reducer runs its ops on meta tensors and keeps none of them afterwards.
TEST_F(DdpTest, MetaBackwardRunsTheReducerAndKeepsNoMetaTensor) {
  Sequential model = MakeModel();
  DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.01});
  const int64_t live = LiveMetaStorages();
  {
    runtime::MetaModeGuard meta;
    cross_entropy(ddp(ones({2, 64})), zeros({2}, {.dtype = DType::kI64}))
        .backward();
  }
  EXPECT_EQ(ddp->num_syncs(), 4);
  for (const Tensor& p : model.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TRUE(p.grad().storage()->is_meta());
    p.set_grad(Tensor());  // what the re-trace does: put the real bindings back
  }
  EXPECT_EQ(LiveMetaStorages(), live);
}

// no_sync(): backwards inside only accumulate; the next one outside reduces
// once, over everything accumulated.
TEST_F(DdpTest, NoSyncAccumulatesLocallyAndTheNextBackwardReduces) {
  Sequential plain = MakeModel(), wrapped = MakeModel();
  DistributedDataParallel ddp(wrapped, {.bucket_cap_mb = 0.01});
  Generator gen(9);
  const Tensor x = randn({8, 64}, {}, &gen);
  const Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &gen);
  {
    auto no_sync = ddp->no_sync();
    ExpectSameGradients(plain, ddp, x, y);
    ExpectSameGradients(plain, ddp, x * 2.0, y);
    EXPECT_EQ(ddp->num_syncs(), 0);
  }
  ExpectSameGradients(plain, ddp, x * 3.0, y);
  EXPECT_EQ(ddp->num_syncs(), 4);
}

TEST_F(DdpTest, StateDictCarriesTheModulePrefixAndForwardDelegates) {
  Sequential model = MakeModel();
  DistributedDataParallel ddp(model);
  std::vector<std::string> names;
  for (const auto& [name, t] : ddp->state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "module.0.weight", "module.0.bias", "module.2.weight",
                       "module.2.bias", "module.3.weight", "module.3.bias"}));
  EXPECT_TRUE(ddp->module() == model.ptr());
  const Tensor x = ones({2, 64});
  EXPECT_EQ(Values(ddp(x)), Values(model(x)));
}

TEST_F(DdpTest, RejectsABadBucketCap) {
  test::ExpectError(
      [] { DistributedDataParallel ddp(MakeModel(), {.bucket_cap_mb = 0}); },
      {"expected bucket_cap_mb > 0 and at most 1048576 (1 TiB), got 0"});
  test::ExpectError(
      [] {
        DistributedDataParallel ddp(
            MakeModel(),
            {.bucket_cap_mb = std::numeric_limits<double>::infinity()});
      },
      {"expected bucket_cap_mb > 0 and at most 1048576 (1 TiB), got inf"});
}

}  // namespace
}  // namespace stepjit::nn
