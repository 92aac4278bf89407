// With loss scaling, an inf/NaN gradient on any rank makes every rank skip
// that step (found_inf is all_reduce'd with max): eager amp::GradScaler, the
// same step compiled, and a plain step compiled with the grad-scaler pass.
// Only the last rank sees the inf; no gradient averaging couples the ranks
// here, so only the found_inf reduction can make the others skip.
#include <cmath>
#include <limits>
#include <vector>

#include "dist/dist.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"

namespace stepjit {
namespace {

constexpr int kSteps = 6;
constexpr int kInfStep = 3;

std::vector<float> Flat(const std::vector<Tensor>& params) {
  std::vector<float> out;
  for (const Tensor& p : params) {
    Tensor c = p.to(DType::kF32).contiguous();
    out.insert(out.end(), c.data<float>(), c.data<float>() + c.numel());
  }
  return out;
}

// The batch of `step` on this rank; the last rank's batch at kInfStep holds
// an inf.
std::pair<Tensor, Tensor> Batch(int step) {
  Generator gen(100 + 10 * dist::rank() + step);
  Tensor x = randn({16, 8}, {}, &gen);
  Tensor y = randn({16, 4}, {}, &gen);
  if (step == kInfStep && dist::rank() == dist::world_size() - 1) {
    x.data<float>()[5] = std::numeric_limits<float>::infinity();
  }
  return {x, y};
}

enum class Mode { kEager, kCompiled, kCompilerScaler };

// `init_after_compile`: the steps are compiled before dist::init(), as a
// program that builds its model and step before it learns its rank might;
// the grad-scaler pass must still all-reduce its inf check.
void RunAndCheck(Mode mode, bool init_after_compile = false) {
  if (!init_after_compile) dist::init();
  nn::Linear model(8, 4);
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler({.init_scale = 1024.0});
  auto scaled_step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = mse_loss(model(x), y);
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  auto plain_step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = mse_loss(model(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto compiled = compile(scaled_step);
  auto compiled_plain = compile(
      plain_step, {.loss_scaling = true, .scaler = {.init_scale = 1024.0}});
  if (init_after_compile) dist::init();
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = Batch(step);
    const std::vector<float> before = Flat(model.parameters());
    switch (mode) {
      case Mode::kEager:
        scaled_step(x, y);
        break;
      case Mode::kCompiled:
        compiled(x, y);
        break;
      case Mode::kCompilerScaler:
        compiled_plain(x, y);
        break;
    }
    const std::vector<float> after = Flat(model.parameters());
    bool changed = false;
    for (size_t i = 0; i < before.size(); ++i) changed |= before[i] != after[i];
    for (float v : after) ASSERT_TRUE(std::isfinite(v)) << "step " << step;
    EXPECT_EQ(changed, step != kInfStep)
        << "rank " << dist::rank() << " step " << step
        << (step == kInfStep ? ": should have skipped"
                             : ": should have updated");
  }
  if (mode == Mode::kCompilerScaler) {
    const CompileStats s = compiled_plain.stats();
    EXPECT_EQ(s.skipped_steps, 1);
    EXPECT_EQ(s.loss_scale, 512.0);  // backed off once
    EXPECT_GE(s.replays, 3);
  } else {
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(scaler.get_scale(), 512.0);
  }
  if (mode == Mode::kCompiled) {
    EXPECT_GE(compiled.stats().replays, 3);
  }
}

TEST(AmpSkip, EagerScalerSkipsOnEveryRank) { RunAndCheck(Mode::kEager); }
TEST(AmpSkip, CompiledScalerSkipsOnEveryRank) { RunAndCheck(Mode::kCompiled); }
TEST(AmpSkip, CompilerInsertedScalerSkipsOnEveryRank) {
  RunAndCheck(Mode::kCompilerScaler);
}
// Its own ctest entry (dist.compile_before_init) runs it first in a fresh
// process, so that dist::init() really comes after compile().
TEST(AmpSkipCompiledBeforeInit, CompilerInsertedScalerSkipsOnEveryRank) {
  RunAndCheck(Mode::kCompilerScaler, /*init_after_compile=*/true);
}

}  // namespace
}  // namespace stepjit
