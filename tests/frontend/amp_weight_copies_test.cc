// amp-weight-copies (passes/amp_weight_copies.h): a compiled autocast step
// that keeps each weight's low-precision copy as state computes exactly what
// the same step computes when it casts every weight at every step, bit for
// bit, whatever happens to the weights between calls: the optimizer's
// updates, skipped f16 steps, writes from outside the step, frozen weights,
// the accuracy checker's runs.
#include <cstdlib>
#include <functional>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "frontend/specialization.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/amp_task.h"

namespace stepjit {
namespace {

using ir::DType;
using testing_task::ClassificationTask;

enum class Opt { kNesterov, kAdamW };

struct Trainee {
  nn::Sequential model;
  std::unique_ptr<optim::Optimizer> opt;
  std::vector<Tensor> params;  // what the optimizer updates
};

// TaskMlp's initialization; with `freeze_first`, the first layer's weight
// neither takes a gradient nor is updated (fine-tuning the rest).
Trainee Make(Opt opt, bool freeze_first) {
  Trainee r{testing_task::TaskMlp(), nullptr, {}};
  std::vector<Tensor> all = r.model.parameters();
  for (size_t i = 0; i < all.size(); ++i) {
    if (freeze_first && i == 0) {
      all[i].set_requires_grad(false);
      continue;
    }
    r.params.push_back(all[i]);
  }
  if (opt == Opt::kNesterov) {
    r.opt = std::make_unique<optim::SGD>(
        r.params,
        optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
  } else {
    r.opt = std::make_unique<optim::AdamW>(r.params,
                                           optim::AdamWOptions{.lr = 1e-2});
  }
  return r;
}

std::function<Tensor(const Tensor&, const Tensor&)> PlainStep(Trainee& r,
                                                              bool clip) {
  return [&r, clip](const Tensor& x, const Tensor& y) {
    r.opt->zero_grad();
    Tensor loss = cross_entropy(r.model(x), y);
    loss.backward();
    if (clip) nn::utils::clip_grad_norm_(r.params, 0.5);
    r.opt->step();
    return loss;
  };
}

// Sets STEPJIT_DISABLE for the calls of the reference step only.
struct DisableCopies {
  DisableCopies() { setenv("STEPJIT_DISABLE", "amp-weight-copies", 1); }
  ~DisableCopies() { unsetenv("STEPJIT_DISABLE"); }
};

template <typename F>
std::string Ir(const CompiledStep<F>& f) {
  std::ostringstream os;
  f.dump_ir(os);
  return os.str();
}

// The largest |a - b| over every parameter (0 when bit for bit equal and
// finite).
double MaxParamDiff(Trainee& a, Trainee& b) {
  const std::vector<Tensor> pa = a.model.parameters(),
                            pb = b.model.parameters();
  double worst = 0;
  for (size_t k = 0; k < pa.size(); ++k) {
    worst = std::max(worst, amax(abs(pa[k] - pb[k])).item());
  }
  return worst;
}

struct Case {
  DType low;
  Opt opt;
  bool clip;
  bool freeze_first;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << ir::DTypeName(c.low) << (c.opt == Opt::kAdamW ? " AdamW" : " Nesterov")
      << (c.clip ? " clipped" : "")
      << (c.freeze_first ? " first layer frozen" : "");
}

class AmpWeightCopiesTest : public ::testing::TestWithParam<Case> {};

// Writes between calls that a kept copy must see: the weight scaled in
// place, overwritten by copy_, and an eager call of the step (a batch of a
// new size runs eagerly once max_traces is reached).
void WriteFromOutside(Trainee& r, int step) {
  NoGradGuard no_grad;
  Tensor w0 = r.model.parameters()[0];
  Tensor w2 = r.model.parameters()[2];
  if (step == 6) w0.mul_(0.5);
  if (step == 9) w2.copy_(w2 * 1.25 + 0.01);
}

TEST_P(AmpWeightCopiesTest, KeptCopiesGiveTheBitsOfCastingEveryStep) {
  const Case c = GetParam();
  const ClassificationTask task = testing_task::OverlappingClasses();
  Trainee kept = Make(c.opt, c.freeze_first),
          each = Make(c.opt, c.freeze_first);
  const CompileOptions options{
      .max_traces = 2, .shapes = Shapes::kStatic, .amp = c.low};
  auto fast_kept = compile(PlainStep(kept, c.clip), options);
  auto fast_each = compile(PlainStep(each, c.clip), options);
  for (int step = 0; step < 16; ++step) {
    // Step 12 has another batch size: a second trace (static shapes);
    // step 14 a third, past max_traces: it runs eagerly and writes every
    // weight.
    const int64_t batch = step == 12 ? 48 : step == 14 ? 40 : 64;
    const int64_t at = (step * 64) % (ClassificationTask::kTrain - batch);
    Tensor x = task.x_train.slice(0, at, at + batch).contiguous();
    Tensor y = task.y_train.slice(0, at, at + batch).contiguous();
    WriteFromOutside(kept, step);
    WriteFromOutside(each, step);
    const double lk = fast_kept(x, y).item();
    double lc;
    {
      DisableCopies off;
      lc = fast_each(x, y).item();
    }
    ASSERT_EQ(lk, lc) << "step " << step;
    ASSERT_EQ(MaxParamDiff(kept, each), 0.0) << "step " << step;
  }
  const CompileStats s = fast_kept.stats();
  EXPECT_EQ(s.traces, 2) << s;
  EXPECT_GE(s.replays, 11) << s;
  EXPECT_EQ(s.fallbacks, 1) << s;
  const std::string name = absl::StrCat(".as_", ir::DTypeName(c.low));
  const std::string ir_kept = Ir(fast_kept), ir_each = Ir(fast_each);
  EXPECT_NE(ir_kept.find("%s0" + name), std::string::npos) << ir_kept;
  EXPECT_NE(ir_kept.find("%s2" + name), std::string::npos) << ir_kept;
  EXPECT_EQ(ir_each.find(name), std::string::npos) << ir_each;
  // The frozen weight's copy is read, never written by the step; each
  // updated weight's copy is written back by the region that updates it.
  EXPECT_EQ(ir_kept.find("assign %s0" + name) == std::string::npos,
            c.freeze_first)
      << ir_kept;
  EXPECT_NE(ir_kept.find("assign %s2" + name), std::string::npos) << ir_kept;
  // No kernel converts a weight: the only casts to the low dtype outside
  // the regions are of the batch.
  EXPECT_EQ(ir_kept.find("= cast %s"), std::string::npos) << ir_kept;
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (DType low : {DType::kBF16, DType::kF16}) {
    for (Opt opt : {Opt::kNesterov, Opt::kAdamW}) {
      for (bool clip : {false, true}) {
        for (bool freeze : {false, true})
          out.push_back({low, opt, clip, freeze});
      }
    }
  }
  return out;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat(c.low == DType::kBF16 ? "Bf16" : "F16",
                      c.opt == Opt::kAdamW ? "AdamW" : "Nesterov",
                      c.clip ? "Clipped" : "",
                      c.freeze_first ? "FrozenFirst" : "");
}

INSTANTIATE_TEST_SUITE_P(Matrix, AmpWeightCopiesTest,
                         ::testing::ValuesIn(Cases()), CaseName);

// f16 with loss scaling: a step whose grads overflow is skipped; the
// weights and their copies stay as they were.
TEST(AmpWeightCopiesScalerTest, SkippedStepsLeaveTheCopiesAsTheWeights) {
  const ClassificationTask task = testing_task::OverlappingClasses();
  Trainee kept = Make(Opt::kAdamW, false), each = Make(Opt::kAdamW, false);
  const CompileOptions options{
      .amp = DType::kF16,
      .scaler = {.init_scale = 4096.0, .growth_interval = 3}};
  auto fast_kept = compile(PlainStep(kept, true), options);
  auto fast_each = compile(PlainStep(each, true), options);
  for (int step = 0; step < 12; ++step) {
    const int64_t at = (step * 64) % (ClassificationTask::kTrain - 64);
    Tensor x = task.x_train.slice(0, at, at + 64).contiguous();
    Tensor y = task.y_train.slice(0, at, at + 64).contiguous();
    if (step == 5 || step == 6) x = x * scalar_tensor(1e30);  // overflows f16
    const double lk = fast_kept(x, y).item();
    double lc;
    {
      DisableCopies off;
      lc = fast_each(x, y).item();
    }
    if (lk == lk || lc == lc) {
      ASSERT_EQ(lk, lc) << "step " << step;
    }
    ASSERT_EQ(MaxParamDiff(kept, each), 0.0) << "step " << step;
  }
  EXPECT_EQ(fast_kept.stats().skipped_steps, 2) << fast_kept.stats();
  EXPECT_EQ(fast_each.stats().skipped_steps, 2) << fast_each.stats();
}

// The caller's half: a copy is converted again exactly when its source's
// storage was written since the copy was marked current.
TEST(StateCopiesTest, ConvertedAgainExactlyWhenTheSourceWasWritten) {
  std::vector<Tensor> state = {randn({7, 5}),
                               zeros({7, 5}, {.dtype = DType::kBF16})};
  std::vector<frontend::StateCopy> copies = {{.copy = 1, .source = 0}};
  auto expect_copy_of_source = [&](const char* when) {
    EXPECT_EQ(amax(abs(state[1].to(DType::kF32) -
                       state[0].to(DType::kBF16).to(DType::kF32)))
                  .item(),
              0.0)
        << when;
  };
  frontend::RefreshStateCopies(copies, state);  // never current: converted
  expect_copy_of_source("first run");
  frontend::MarkStateCopiesCurrent(copies, state);
  // Unchanged source: the copy is left alone (a marker shows it).
  state[1].fill_(3.0);
  frontend::RefreshStateCopies(copies, state);
  EXPECT_EQ(sum(state[1].to(DType::kF32)).item(), 3.0 * 35);
  frontend::RefreshStateCopies(copies, state);
  frontend::MarkStateCopiesCurrent(copies, state);
  // Written in place, through a view, by copy_: converted again.
  state[0].mul_(0.5);
  frontend::RefreshStateCopies(copies, state);
  expect_copy_of_source("after mul_");
  frontend::MarkStateCopiesCurrent(copies, state);
  state[0].slice(0, 2, 3).fill_(-7.0);
  frontend::RefreshStateCopies(copies, state);
  expect_copy_of_source("after a write through a view");
  EXPECT_EQ(sum(state[1].to(DType::kF32).slice(0, 2, 3)).item(), -35.0);
  frontend::MarkStateCopiesCurrent(copies, state);
  state[0].copy_(randn({7, 5}));
  frontend::RefreshStateCopies(copies, state);
  expect_copy_of_source("after copy_");
}

}  // namespace
}  // namespace stepjit
