// Mixed precision inserted by compile(step, {.amp}) has PyTorch AMP's
// semantics: checked against the same step written by hand with
// amp::Autocast and amp::GradScaler (scale -> backward -> unscale_ -> clip ->
// step -> update). Parameters and their grads stay f32, every consumer of a
// gradient (clip_grad_norm_, the optimizer) reads the unscaled f32 value, and
// the optimizer's math runs in f32.
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "frontend/stepjit.h"
#include "frontend/tracer.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "passes/autocast.h"
#include "passes/grad_scaler.h"
#include "passes/pass_manager.h"
#include "tests/amp_task.h"

namespace stepjit {
namespace {

using ir::DType;
using testing_task::ClassificationTask;

enum class Opt { kSgd, kNesterov, kAdamW };

struct AmpCase {
  DType low;  // kF32: no autocast (loss scaling alone)
  bool scaling;
  Opt opt;
  bool clip;
};

constexpr int kSteps = 20;
constexpr int kPoisoned = 9;   // x * inf: every grad is inf/NaN, a scaler skips the step
constexpr int kLrChange = 13;  // set_lr between calls: lr is state, read on every replay
constexpr int64_t kBatch = 64;
// The unscaled grad norm of this task is 0.48 to 0.65 over the 20 steps:
// clipping scales most steps' grads down, and leaves a few alone.
constexpr double kMaxNorm = 0.5;
// A small init_scale and growth_interval: within the 18 scaled steps the
// scale grows three times and backs off once (4096 -> 16384), and never
// overflows an f16 backward.
const amp::GradScalerOptions kScaler = {.init_scale = 4096.0, .growth_interval = 5};

// The unit roundoff of the low dtype: half an ulp of 1 (f16 keeps 10
// fraction bits, bf16 7, f32 23). The tolerances below are multiples of it.
double UnitRoundoff(DType low) {
  return low == DType::kF16 ? 0x1p-11 : low == DType::kBF16 ? 0x1p-8 : 0x1p-24;
}

std::unique_ptr<optim::Optimizer> MakeOptimizer(Opt opt, const std::vector<Tensor>& params) {
  switch (opt) {
    case Opt::kSgd:
      return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1});
    case Opt::kNesterov:
      return std::make_unique<optim::SGD>(
          params, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
    case Opt::kAdamW:
      return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 1e-2});
  }
  return nullptr;
}

// One model (TaskMlp's fixed initialization) and its optimizer.
struct Trainee {
  explicit Trainee(Opt o)
      : model(testing_task::TaskMlp()), opt(MakeOptimizer(o, model.parameters())) {}
  nn::Sequential model;
  std::unique_ptr<optim::Optimizer> opt;
};

// Batches of the task's training set; with `poison`, batch kPoisoned is inf.
std::vector<std::pair<Tensor, Tensor>> Batches(const ClassificationTask& task, bool poison) {
  std::vector<std::pair<Tensor, Tensor>> out;
  for (int i = 0; i < kSteps; ++i) {
    const int64_t b = (i * kBatch) % ClassificationTask::kTrain;
    Tensor x = task.x_train.slice(0, b, b + kBatch).contiguous();
    if (poison && i == kPoisoned) x = x * scalar_tensor(std::numeric_limits<double>::infinity());
    out.emplace_back(x, task.y_train.slice(0, b, b + kBatch).contiguous());
  }
  return out;
}

// The plain f32 step that compile({.amp}) rewrites.
auto PlainStep(Trainee& r, bool clip) {
  return [&r, clip](const Tensor& x, const Tensor& y) {
    r.opt->zero_grad();
    Tensor loss = cross_entropy(r.model(x), y);
    loss.backward();
    if (clip) nn::utils::clip_grad_norm_(r.model.parameters(), kMaxNorm);
    r.opt->step();
    return loss;
  };
}

// The same step with mixed precision by hand. The compiled step's first two
// calls (warmup and trace) run as written, in f32, so `amp_on` is false for
// those two.
Tensor HandWrittenStep(Trainee& r, amp::GradScaler* scaler, const AmpCase& c, bool amp_on,
                       const Tensor& x, const Tensor& y) {
  r.opt->zero_grad();
  Tensor loss;
  {
    amp::Autocast guard(c.low == DType::kF32 ? DType::kBF16 : c.low,
                        amp_on && c.low != DType::kF32);
    loss = cross_entropy(r.model(x), y);
  }
  if (scaler == nullptr || !amp_on) {
    loss.backward();
    if (c.clip) nn::utils::clip_grad_norm_(r.model.parameters(), kMaxNorm);
    r.opt->step();
    return loss;
  }
  scaler->scale(loss).backward();
  if (c.clip) {
    scaler->unscale_(*r.opt);
    nn::utils::clip_grad_norm_(r.model.parameters(), kMaxNorm);
  }
  scaler->step(*r.opt);
  scaler->update();
  return loss;
}

std::string CaseName(const ::testing::TestParamInfo<AmpCase>& info) {
  const AmpCase& c = info.param;
  const char* opt = c.opt == Opt::kSgd ? "Sgd" : c.opt == Opt::kNesterov ? "Nesterov" : "AdamW";
  const char* low = c.low == DType::kF16 ? "F16" : c.low == DType::kBF16 ? "Bf16" : "F32";
  return absl::StrCat(low, c.scaling ? "Scaled" : "", opt, c.clip ? "Clipped" : "");
}

void PrintTo(const AmpCase& c, std::ostream* os) { *os << CaseName({c, 0}); }

class AmpSemanticsTest : public ::testing::TestWithParam<AmpCase> {};

// Tolerances. The compiled and the hand-written step run the same ops in the
// same dtypes (on the CPU they agree bit for bit today); they may differ
// only where fusion rounds an intermediate to the low dtype at another
// point, a relative error of about u per rounding. Each step's update is
// then off by a few u of its size, so a parameter may drift from the
// reference by a few u times the distance it travelled (the sum over steps
// of its largest per-step change): 4u of it. Optimizer state (momentum,
// exp_avg, exp_avg_sq) within 4u of its magnitude, the loss (f32, from
// low-precision logits) within 4u * (1 + |loss|). The step count, the
// scale and the skipped steps are exact. The bugs these tests guard against
// are far outside: a gradient read scaled is off by the scale (2^12 and
// more), and clipping the scaled f16 grads zeroes them.
constexpr double kUlps = 4;

TEST_P(AmpSemanticsTest, CompiledMatchesHandWrittenAutocastAndGradScaler) {
  const AmpCase c = GetParam();
  const double u = UnitRoundoff(c.low);
  const ClassificationTask task = testing_task::OverlappingClasses();
  const auto batches = Batches(task, c.scaling);
  Trainee ref(c.opt), comp(c.opt);
  amp::GradScaler scaler(kScaler);
  auto fast = compile(PlainStep(comp, c.clip),
                      {.amp = c.low, .loss_scaling = c.scaling, .scaler = kScaler});
  const std::vector<Tensor> pr = ref.model.parameters(), pc = comp.model.parameters();
  std::vector<double> travelled(pr.size(), 0.0);
  double worst_param = 0, worst_loss = 0;  // in units of their tolerance
  double final_param_error = 0;
  double last_le = 0, last_lc = 0;
  for (int i = 0; i < kSteps; ++i) {
    if (i == kLrChange) {
      ref.opt->set_lr(ref.opt->lr() * 0.5);
      comp.opt->set_lr(comp.opt->lr() * 0.5);
    }
    const auto& [x, y] = batches[i];
    std::vector<Tensor> before;
    for (const Tensor& p : pr) before.push_back(p.clone());
    const double le =
        HandWrittenStep(ref, c.scaling ? &scaler : nullptr, c, i >= 2, x, y).item();
    const double lc = fast(x, y).item();
    last_le = le;
    last_lc = lc;
    for (size_t k = 0; k < pr.size(); ++k) travelled[k] += amax(abs(pr[k] - before[k])).item();
    EXPECT_EQ(std::isfinite(lc), std::isfinite(le)) << "step " << i << ": " << lc << " vs " << le;
    if (std::isfinite(le) && std::isfinite(lc)) {
      const double tol = kUlps * u * (1 + std::abs(le));
      worst_loss = std::max(worst_loss, std::abs(lc - le) / tol);
      EXPECT_NEAR(lc, le, tol) << "step " << i;
    }
    if (c.scaling) {
      const CompileStats s = fast.stats();
      EXPECT_EQ(s.loss_scale, i < 2 ? kScaler.init_scale : scaler.get_scale()) << "step " << i;
      EXPECT_EQ(s.skipped_steps, scaler.skipped_steps()) << "step " << i;
    }
    for (size_t k = 0; k < pr.size(); ++k) {
      const double tol = kUlps * u * travelled[k];
      const double err = amax(abs(pc[k] - pr[k])).item();
      worst_param = std::max(worst_param, err / tol);
      if (i == kSteps - 1) final_param_error = std::max(final_param_error, err);
      EXPECT_LE(err, tol) << "step " << i << " param " << k;
    }
  }
  std::printf("%s: last loss compiled %.6g, hand-written %.6g; final parameter error %.3g; "
              "worst parameter and loss errors %.3g and %.3g of their tolerances; skipped %lld "
              "and %lld\n",
              CaseName({c, 0}).c_str(), last_lc, last_le, final_param_error, worst_param,
              worst_loss,
              static_cast<long long>(fast.stats().skipped_steps),
              static_cast<long long>(c.scaling ? scaler.skipped_steps() : 0));
  for (size_t k = 0; k < pc.size(); ++k) {
    EXPECT_EQ(pc[k].dtype(), DType::kF32);
    ASSERT_TRUE(pc[k].grad().defined());
    EXPECT_EQ(pc[k].grad().dtype(), DType::kF32) << "grads stay f32";
  }
  // Optimizer state: the step count first, then momentum buffers or moments.
  const std::vector<Tensor> sr = ref.opt->state_tensors(), sc = comp.opt->state_tensors();
  ASSERT_EQ(sc.size(), sr.size());
  EXPECT_EQ(sc[0].item(), sr[0].item()) << "step count";
  for (size_t k = 1; k < sr.size(); ++k) {
    EXPECT_EQ(sc[k].dtype(), DType::kF32);
    const double tol = kUlps * u * amax(abs(sr[k])).item();
    EXPECT_LE(amax(abs(sc[k] - sr[k])).item(), tol) << "optimizer state " << k;
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.fallbacks, 0) << fast.explain();
  EXPECT_EQ(s.replays, kSteps - 2) << fast.explain();
  if (c.scaling) {
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(s.skipped_steps, 1);
    EXPECT_EQ(s.loss_scale, scaler.get_scale());
    EXPECT_EQ(s.loss_scale, 16384.0);
    EXPECT_EQ(sc[0].item(), kSteps - 1.0) << "the poisoned step is not counted";
  }
}

std::vector<AmpCase> Matrix() {
  std::vector<AmpCase> cases;
  for (auto [low, scaling] : {std::pair{DType::kF16, true}, std::pair{DType::kBF16, true},
                              std::pair{DType::kBF16, false}, std::pair{DType::kF32, true}}) {
    for (Opt opt : {Opt::kSgd, Opt::kNesterov, Opt::kAdamW}) {
      for (bool clip : {false, true}) {
        // Without a scaler nothing would skip an inf step (those run
        // unpoisoned); one case per optimizer shows the f32 update.
        if (!scaling && clip) continue;
        // Loss scaling alone (f32) reads gradients as autocast's f16 does
        // but for the cast: clipping is the case that differs.
        if (low == DType::kF32 && !clip) continue;
        cases.push_back({low, scaling, opt, clip});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Matrix, AmpSemanticsTest, ::testing::ValuesIn(Matrix()), CaseName);

// After autocast-bf16 (no loss scaling), the optimizer's ops read and write
// no bf16: they see the f32 gradient (the cast back to the parameter's
// dtype), so lr * g and the update run in f32 as in eager autocast. The
// optimizer's ops are found as those that feed a state write-back but no
// returned value (backward and clip_grad_norm_ feed the returned grads).
TEST(AmpSemanticsIrTest, AutocastLeavesTheOptimizerInF32) {
  const ClassificationTask task = testing_task::OverlappingClasses();
  const auto batches = Batches(task, false);
  for (Opt o : {Opt::kSgd, Opt::kNesterov, Opt::kAdamW}) {
    for (bool clip : {false, true}) {
      SCOPED_TRACE(CaseName({{DType::kBF16, false, o, clip}, 0}));
      Trainee r(o);
      auto step = PlainStep(r, clip);
      step(batches[0].first, batches[0].second);  // creates the optimizer's state
      frontend::Tracer tracer("step");
      tracer.Begin({batches[1].first, batches[1].second});
      const Tensor loss = step(batches[1].first, batches[1].second);
      frontend::Trace trace = tracer.End({loss});
      ASSERT_TRUE(trace.break_reason.empty()) << trace.break_reason;
      ir::Graph& g = *trace.graph;
      passes::PassStats stats;
      ASSERT_TRUE(passes::AutocastBf16(g, stats).ok());
      absl::flat_hash_set<const ir::Value*> feeds_return(g.returns().begin(), g.returns().end());
      absl::flat_hash_set<const ir::Value*> feeds_assign;
      int optimizer_ops = 0;
      for (auto it = g.nodes().rbegin(); it != g.nodes().rend(); ++it) {
        const ir::Node& n = **it;
        if (n.kind() == ir::NodeKind::kAssign) {
          feeds_assign.insert(n.inputs()[1]);
          continue;
        }
        bool to_return = false, to_assign = false;
        for (const ir::Value* v : n.outputs()) {
          to_return |= feeds_return.contains(v);
          to_assign |= feeds_assign.contains(v);
        }
        if (to_return) feeds_return.insert(n.inputs().begin(), n.inputs().end());
        if (to_assign) feeds_assign.insert(n.inputs().begin(), n.inputs().end());
        if (!to_assign || to_return) continue;
        ++optimizer_ops;
        for (const ir::Value* v : n.inputs()) {
          EXPECT_NE(v->type().dtype, DType::kBF16) << ir::OpName(n.op()) << " reads a bf16 value";
        }
        EXPECT_NE(n.output()->type().dtype, DType::kBF16) << ir::OpName(n.op());
      }
      EXPECT_GT(optimizer_ops, 0);
      for (size_t i = trace.num_outputs; i < g.returns().size(); ++i) {
        EXPECT_EQ(g.returns()[i]->type().dtype, DType::kF32) << "grad " << i;
      }
    }
  }
}

// Two backward() calls in one step (gradient accumulation): the second
// adds its part to .grad in place after the first part was unscaled and
// checked for inf, so grad-scaler refuses the step, which then runs eagerly
// as written, with the reason in explain().
TEST(AmpSemanticsFallbackTest, LossScalingRefusesTwoBackwardCalls) {
  const ClassificationTask task = testing_task::OverlappingClasses();
  const auto batches = Batches(task, false);
  Trainee r(Opt::kSgd);
  auto step = [&r](const Tensor& x, const Tensor& y) {
    r.opt->zero_grad();
    const int64_t half = kBatch / 2;
    Tensor first = cross_entropy(r.model(x.slice(0, 0, half)), y.slice(0, 0, half));
    first.backward();
    cross_entropy(r.model(x.slice(0, half, kBatch)), y.slice(0, half, kBatch)).backward();
    r.opt->step();
    return first;
  };
  auto fast = compile(step, {.amp = DType::kF16});
  for (int i = 0; i < 4; ++i) fast(batches[i].first, batches[i].second);
  EXPECT_EQ(fast.stats().replays, 0) << fast.explain();
  EXPECT_NE(fast.explain().find("calls backward() 2 times"), std::string::npos) << fast.explain();
}

}  // namespace
}  // namespace stepjit
