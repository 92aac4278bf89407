// Mixed precision written by hand (autocast + GradScaler) inside a compiled
// step: the casts and the scaler ops are traced, and the compiled step
// agrees with eager step for step, including steps skipped for inf grads.
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "ir/printer.h"
#include "tests/amp_task.h"
#include "tests/util/train_step.h"

namespace stepjit {
namespace {

using ir::DType;

struct AmpRun {
  nn::Sequential model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<amp::GradScaler> scaler;
};

AmpRun Make() {
  manual_seed(7);
  AmpRun r;
  r.model.push_back(nn::Linear(24, 32));
  r.model.push_back(nn::ReLU());
  r.model.push_back(nn::Linear(32, 5));
  r.opt = std::make_unique<optim::AdamW>(r.model.parameters(), optim::AdamWOptions{.lr = 1e-2});
  r.scaler = std::make_unique<amp::GradScaler>(
      amp::GradScalerOptions{.init_scale = 1024.0, .growth_interval = 4});
  return r;
}

// Batches; some contain an inf so that the forward, the loss and every
// grad become inf/NaN and the scaler must skip that step.
std::vector<std::pair<Tensor, Tensor>> Batches(int n, const std::vector<int>& poisoned) {
  Generator gen(8);
  std::vector<std::pair<Tensor, Tensor>> out;
  for (int i = 0; i < n; ++i) {
    Tensor x = randn({16, 24}, {}, &gen);
    Tensor y = randint(0, 5, {16}, {.dtype = DType::kI64}, &gen);
    for (int p : poisoned) {
      if (p == i) x = x * scalar_tensor(std::numeric_limits<double>::infinity());
    }
    out.emplace_back(x, y);
  }
  return out;
}

TEST(AmpCompileTest, CompiledScalerMatchesEagerIncludingSkippedSteps) {
  for (DType low : {DType::kBF16, DType::kF16}) {
    AmpRun eager = Make(), comp = Make();
    auto step_for = [low](AmpRun& r) {
      return [&r, low](const Tensor& x, const Tensor& y) {
        r.opt->zero_grad();
        Tensor loss;
        {
          amp::Autocast guard(low);
          loss = cross_entropy(r.model(x), y);
        }
        r.scaler->scale(loss).backward();
        r.scaler->unscale_(*r.opt);
        nn::utils::clip_grad_norm_(r.model.parameters(), 1.0);
        r.scaler->step(*r.opt);
        r.scaler->update();
        return loss;
      };
    };
    auto fast = compile(step_for(comp));
    auto slow = step_for(eager);
    const auto batches = Batches(14, {5, 9, 10});
    for (size_t i = 0; i < batches.size(); ++i) {
      const auto& [x, y] = batches[i];
      Tensor le = slow(x, y), lc = fast(x, y);
      EXPECT_EQ(std::isfinite(le.item()), std::isfinite(lc.item())) << "step " << i;
      if (std::isfinite(le.item())) {
        EXPECT_NEAR(lc.item(), le.item(), 1e-4) << "step " << i;
      }
      EXPECT_EQ(comp.scaler->get_scale(), eager.scaler->get_scale()) << "step " << i;
      EXPECT_EQ(comp.scaler->growth_tracker(), eager.scaler->growth_tracker()) << "step " << i;
      auto pe = eager.model.parameters(), pc = comp.model.parameters();
      for (size_t k = 0; k < pe.size(); ++k) {
        const double diff = amax(abs(pe[k] - pc[k])).item();
        EXPECT_LE(diff, 1e-4) << "step " << i << " param " << k;
      }
    }
    EXPECT_EQ(eager.scaler->skipped_steps(), 3);
    EXPECT_EQ(comp.scaler->skipped_steps(), 3);
    EXPECT_EQ(comp.opt->step_count().item(), 11.0);
    const CompileStats s = fast.stats();
    EXPECT_GE(s.replays, 10) << s;
    EXPECT_EQ(s.fallbacks, 0) << s;
    // The trace holds the autocast casts and the scaler's predicated update.
    std::ostringstream os;
    fast.dump_ir(os);
    const std::string ir = os.str();
    EXPECT_NE(ir.find("cast"), std::string::npos);
    EXPECT_NE(ir.find(std::string(ir::DTypeName(low))), std::string::npos) << ir;
    EXPECT_NE(ir.find("where"), std::string::npos);
  }
}

}  // namespace
}  // namespace stepjit

namespace stepjit {
namespace {

// A plain f32 step compiled with {.amp = low} against the same step written
// by hand with eager autocast (and, for f16, a GradScaler with the same
// options). The compiled step's first two calls (warmup and trace) run in
// f32 as written, so the reference runs those two in f32 too.
void CheckCompilerAmpMatchesHandWritten(DType low, bool scaling) {
  AmpRun ref = Make(), comp = Make();
  const amp::GradScalerOptions sopts{.init_scale = 1024.0, .growth_interval = 4};
  auto plain = test::CrossEntropyStep(comp.model, *comp.opt);
  auto fast = compile(plain, {.amp = low, .loss_scaling = scaling, .scaler = sopts});
  amp::GradScaler scaler(sopts);
  const auto batches = Batches(12, scaling ? std::vector<int>{6} : std::vector<int>{});
  for (size_t i = 0; i < batches.size(); ++i) {
    const auto& [x, y] = batches[i];
    const bool amp_on = i >= 2;
    ref.opt->zero_grad();
    Tensor le;
    {
      amp::Autocast guard(low, amp_on);
      le = cross_entropy(ref.model(x), y);
    }
    if (scaling && amp_on) {
      scaler.scale(le).backward();
      scaler.step(*ref.opt);
      scaler.update();
    } else {
      le.backward();
      ref.opt->step();
    }
    Tensor lc = fast(x, y);
    ASSERT_EQ(std::isfinite(le.item()), std::isfinite(lc.item())) << "step " << i;
    if (std::isfinite(le.item())) {
      EXPECT_NEAR(lc.item(), le.item(), 2e-3 * (1 + std::abs(le.item()))) << "step " << i;
    }
    auto pr = ref.model.parameters(), pc = comp.model.parameters();
    for (size_t k = 0; k < pr.size(); ++k) {
      EXPECT_EQ(pc[k].dtype(), DType::kF32);
      ASSERT_TRUE(pc[k].grad().defined());
      EXPECT_EQ(pc[k].grad().dtype(), DType::kF32) << "grads stay f32";
      EXPECT_LE(amax(abs(pr[k] - pc[k])).item(), 2e-3) << "step " << i << " param " << k;
    }
  }
  const CompileStats s = fast.stats();
  EXPECT_GE(s.replays, 9) << s;
  EXPECT_NE(s.passes.find(low == DType::kBF16 ? "autocast-bf16" : "autocast-f16"), std::string::npos)
      << s.passes;
  EXPECT_NE(fast.explain().find("mixed precision: autocast-"), std::string::npos) << fast.explain();
  if (scaling) {
    EXPECT_NE(fast.explain().find("1 steps skipped"), std::string::npos) << fast.explain();
    EXPECT_EQ(s.loss_scale, scaler.get_scale());
    EXPECT_EQ(s.skipped_steps, 1);
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_NE(s.passes.find("grad-scaler"), std::string::npos) << s.passes;
  } else {
    EXPECT_EQ(s.loss_scale, 0.0);
  }
  // Casts fuse into the elementwise regions around them: the only
  // standalone ones make low-precision copies of GEMM operands that are
  // step inputs or state (the batch and the weights), once each per step.
  std::ostringstream os;
  fast.dump_ir(os);
  const std::string ir = os.str();
  int standalone_casts = 0;
  for (size_t p = ir.find("\n  %"); p != std::string::npos; p = ir.find("\n  %", p + 1)) {
    const size_t eol = ir.find('\n', p + 1);
    const std::string line = ir.substr(p + 1, eol - p - 1);
    if (line.find(" = cast ") != std::string::npos) ++standalone_casts;
  }
  EXPECT_LE(standalone_casts, 3) << "x, W1 and W2 at most:\n" << ir;
}

TEST(AmpCompileTest, CompilerBf16MatchesHandWrittenAutocast) {
  CheckCompilerAmpMatchesHandWritten(DType::kBF16, false);
}

TEST(AmpCompileTest, CompilerF16InsertsTheScalerAndMatchesHandWrittenScaler) {
  CheckCompilerAmpMatchesHandWritten(DType::kF16, true);
}

TEST(AmpCompileTest, AutocastStateIsGuarded) {
  AmpRun r = Make();
  auto step = test::CrossEntropyStep(r.model, *r.opt);
  auto fast = compile(step);
  const auto batches = Batches(6, {});
  for (int i = 0; i < 3; ++i) fast(batches[i].first, batches[i].second);
  {
    amp::Autocast guard(DType::kBF16);
    fast(batches[3].first, batches[3].second);  // retraces under autocast
  }
  fast(batches[4].first, batches[4].second);  // the f32 specialization again
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 2) << fast.explain();
  EXPECT_NE(fast.explain().find("autocast(bf16)"), std::string::npos) << fast.explain();
  EXPECT_THROW(compile(step, {.amp = DType::kF64}), Error);
}

}  // namespace
}  // namespace stepjit

namespace stepjit {
namespace {

// 200 steps of an MLP compiled with {.amp = bf16} stay close to the same
// step compiled in f32: mean loss over the last 50 steps within 0.05 and
// validation accuracy (evaluated under autocast) within 3 points.
TEST(AmpCompileTest, CompiledBf16TrainingTracksF32) {
  const testing_task::ClassificationTask task =
      testing_task::OverlappingClasses();
  testing_task::ExpectBf16TracksF32("compiled ", [&](bool bf16) {
    nn::Sequential model = testing_task::TaskMlp();
    optim::AdamW opt(model.parameters(), {.lr = 3e-3});
    auto fast = compile(test::CrossEntropyStep(model, opt),
                        {.amp = bf16 ? DType::kBF16 : DType::kF32});
    const testing_task::TaskRun run = testing_task::TrainAndEvaluate(
        task, model,
        [&](const Tensor& x, const Tensor& y) { return fast(x, y).item(); },
        bf16);
    EXPECT_GE(fast.stats().replays, 197);
    return run;
  });
}

}  // namespace
}  // namespace stepjit
