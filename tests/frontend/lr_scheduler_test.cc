// Parameter groups and learning-rate schedules: the decay/no-decay split,
// per-group lr and weight decay against single-group optimizers, the
// schedules' factors against their closed forms, and a compiled step whose
// lr changes every step without a retrace while it follows the eager step.
#include <cmath>
#include <numbers>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/util/expect_error.h"
#include "tests/util/train_step.h"

namespace stepjit {
namespace {

using test::ExpectError;

std::vector<float> Host(const Tensor& t) {
  return t.contiguous().to_vector<float>();
}

TEST(ParamGroupTest, DecayGroupsSplitMatricesFromBiasesAndNorms) {
  nn::Sequential model(nn::Linear(4, 3), nn::LayerNorm(3), nn::Linear(3, 2));
  const std::vector<optim::ParamGroup> groups =
      optim::DecayGroups(*model.ptr(), 0.1);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params.size(), 2u);  // the two weights
  EXPECT_EQ(groups[1].params.size(),
            4u);  // two biases, the norm's weight and bias
  EXPECT_EQ(groups[0].weight_decay, 0.1);
  EXPECT_EQ(groups[1].weight_decay, 0.0);
  for (const Tensor& p : groups[0].params) EXPECT_EQ(p.dim(), 2);
  for (const Tensor& p : groups[1].params) EXPECT_EQ(p.dim(), 1);
}

// Each group updates exactly as an optimizer holding only that group with
// the group's settings.
template <typename Opt, typename Options>
void ExpectGroupsActAlone(Options o) {
  manual_seed(3);
  const Tensor w = randn({3, 4}).set_requires_grad(true);
  const Tensor b = randn({4}).set_requires_grad(true);
  const Tensor w1 = w.detach().clone().set_requires_grad(true);
  const Tensor b1 = b.detach().clone().set_requires_grad(true);
  Opt grouped(
      std::vector<optim::ParamGroup>{
          {.params = {w}, .weight_decay = 0.5},
          {.params = {b}, .lr = 0.02, .weight_decay = 0.0}},
      o);
  Options ow = o, ob = o;
  ow.weight_decay = 0.5;
  ob.lr = 0.02;
  ob.weight_decay = 0.0;
  Opt alone_w({w1}, ow), alone_b({b1}, ob);
  const Tensor x = randn({2, 3});
  for (int s = 0; s < 3; ++s) {
    grouped.zero_grad();
    sum(tanh(matmul(x, w) + b)).backward();
    grouped.step();
    alone_w.zero_grad();
    alone_b.zero_grad();
    sum(tanh(matmul(x, w1) + b1)).backward();
    alone_w.step();
    alone_b.step();
  }
  EXPECT_EQ(Host(w), Host(w1));
  EXPECT_EQ(Host(b), Host(b1));
}

TEST(ParamGroupTest, GroupsUseTheirOwnLrAndWeightDecay) {
  ExpectGroupsActAlone<optim::AdamW>(optim::AdamWOptions{.lr = 0.01});
  ExpectGroupsActAlone<optim::SGD>(
      optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

TEST(ParamGroupTest, RefusesBadGroups) {
  const Tensor p = ones({2}).set_requires_grad(true);
  ExpectError(
      [&] {
        optim::AdamW(std::vector<optim::ParamGroup>{{.params = {p}}, {}});
      },
      {"AdamW", "parameter group 1 is empty"});
  ExpectError(
      [&] {
        optim::SGD(std::vector<optim::ParamGroup>{{.params = {p}, .lr = -1.0}});
      },
      {"SGD", "invalid learning rate: -1"});
  optim::AdamW opt({p});
  ExpectError([&] { opt.set_lr(3, 0.1); },
              {"AdamW", "no parameter group 3", "there are 1"});
}

TEST(LrSchedulerTest, FactorsFollowTheirClosedForms) {
  const Tensor p = ones({2}).set_requires_grad(true);
  optim::SGD opt(std::vector<optim::ParamGroup>{{.params = {p}, .lr = 0.5}},
                 {.lr = 0.1});
  optim::lr_scheduler::WarmupCosineLR cos(
      opt, {.warmup_steps = 3, .total_steps = 9, .min_factor = 0.1});
  for (int64_t s = 0; s <= 11; ++s) {
    double f = 0;
    if (s < 3) {
      f = (s + 1) / 3.0;
    } else {
      const double done = std::min(1.0, (s - 3) / 6.0);
      f = 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * done));
    }
    EXPECT_NEAR(cos.get_last_lr()[0], 0.5 * f, 1e-15) << s;
    EXPECT_NEAR(opt.lr(), 0.5 * f, 1e-7) << s;  // the f32 tensor
    cos.step();
  }
  optim::SGD opt2({p}, {.lr = 1.0});
  optim::lr_scheduler::StepLR steps(opt2, 2, 0.5);
  std::vector<double> got;
  for (int s = 0; s < 6; ++s, steps.step())
    got.push_back(steps.get_last_lr()[0]);
  EXPECT_EQ(got, (std::vector<double>{1, 1, 0.5, 0.5, 0.25, 0.25}));
  ExpectError([&] { optim::lr_scheduler::StepLR(opt2, 0); },
              {"StepLR", "step_size", "0"});
  ExpectError(
      [&] {
        optim::lr_scheduler::WarmupCosineLR(
            opt2, {.warmup_steps = 5, .total_steps = 5});
      },
      {"WarmupCosineLR", "warmup_steps < total_steps", "5 and 5"});
}

// The scheduler changes the lr tensors between compiled steps: one trace,
// and the parameters follow the eager run of the same schedule.
std::vector<std::vector<float>> TrainScheduled(bool compiled,
                                               CompileStats* stats,
                                               std::vector<double>* lrs) {
  manual_seed(5);
  nn::Sequential model(nn::Linear(6, 8), nn::GELU(), nn::Linear(8, 3));
  optim::AdamW opt(optim::DecayGroups(*model.ptr(), 0.1), {.lr = 1e-2});
  optim::lr_scheduler::WarmupCosineLR sched(
      opt, {.warmup_steps = 4, .total_steps = 12});
  auto step = test::OptimizerStep(opt, [&](const Tensor& x, const Tensor& y) {
    return nn::functional::cross_entropy(model(x), y);
  });
  auto fast =
      compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager});
  Generator gen(6);
  std::vector<std::vector<float>> out;
  for (int s = 0; s < 12; ++s) {
    const Tensor x = randn({5, 6}, {}, &gen);
    const Tensor y = randint(0, 3, {5}, {.dtype = DType::kI64}, &gen);
    out.push_back(Host(fast(x, y)));
    if (lrs) lrs->push_back(opt.lr(0));
    sched.step();
  }
  for (const Tensor& p : model.parameters()) out.push_back(Host(p));
  if (stats) *stats = fast.stats();
  return out;
}

TEST(LrSchedulerTest, CompiledStepFollowsTheScheduleWithoutRetracing) {
  CompileStats stats;
  std::vector<double> lrs;
  const auto got = TrainScheduled(true, &stats, &lrs);
  const auto want = TrainScheduled(false, nullptr, nullptr);
  EXPECT_EQ(stats.traces, 1);
  EXPECT_GE(stats.replays, 8);
  // Every step has a new lr, except where warmup's last (factor 1) meets
  // the cosine's first (factor 1).
  for (size_t i = 1; i < lrs.size(); ++i) {
    if (i == 4) continue;
    EXPECT_NE(lrs[i], lrs[i - 1]) << i;
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k)
    for (size_t i = 0; i < got[k].size(); ++i)
      EXPECT_NEAR(got[k][i], want[k][i], 1e-4 * std::abs(want[k][i]) + 1e-5)
          << k << " " << i;
}

}  // namespace
}  // namespace stepjit
