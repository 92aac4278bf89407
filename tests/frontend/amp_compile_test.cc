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

namespace stepjit {
namespace {

using ir::DType;

struct AmpRun {
  nn::Sequential model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<amp::GradScaler> scaler;
};

AmpRun Make(DType low) {
  manual_seed(7);
  AmpRun r;
  r.model.push_back(nn::Linear(24, 32));
  r.model.push_back(nn::ReLU());
  r.model.push_back(nn::Linear(32, 5));
  r.opt = std::make_unique<optim::AdamW>(r.model.parameters(), optim::AdamWOptions{.lr = 1e-2});
  r.scaler = std::make_unique<amp::GradScaler>(
      amp::GradScalerOptions{.init_scale = 1024.0, .growth_interval = 4});
  (void)low;
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
    AmpRun eager = Make(low), comp = Make(low);
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
      if (std::isfinite(le.item())) EXPECT_NEAR(lc.item(), le.item(), 1e-4) << "step " << i;
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
