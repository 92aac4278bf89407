// Mixed precision in eager mode: the autocast policy, GradScaler semantics
// (skipped steps leave parameters and optimizer state untouched, scale
// backoff and growth), clip_grad_norm_ against a float64 reference, and a
// bf16-autocast training run against the f32 one.
#include <cmath>
#include <limits>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/amp_task.h"

namespace stepjit {
namespace {

using ir::DType;

bool SameBits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  return std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(),
                     static_cast<size_t>(a.numel() * a.element_size())) == 0;
}

TEST(AutocastTest, OutputDTypesFollowThePolicy) {
  Generator gen(1);
  Tensor x = randn({4, 8}, {}, &gen), w = randn({3, 8}, {}, &gen);
  Tensor y = randint(0, 3, {4}, {.dtype = DType::kI64}, &gen);
  for (DType low : {DType::kBF16, DType::kF16}) {
    amp::Autocast guard(low);
    EXPECT_TRUE(amp::IsAutocastEnabled());
    Tensor logits = matmul(x, w, false, true);
    EXPECT_EQ(logits.dtype(), low) << "matmul runs in the low dtype";
    EXPECT_EQ(relu(logits).dtype(), low) << "relu leaves dtypes alone";
    EXPECT_EQ(exp(logits).dtype(), DType::kF32);
    EXPECT_EQ(log(abs(logits) + 1.0).dtype(), DType::kF32);
    EXPECT_EQ(softmax(logits, 1).dtype(), DType::kF32);
    EXPECT_EQ(log_softmax(logits, 1).dtype(), DType::kF32);
    EXPECT_EQ(sum(logits).dtype(), DType::kF32);
    EXPECT_EQ(mean(logits, {1}).dtype(), DType::kF32);
    EXPECT_EQ(pow(logits, 2.0).dtype(), DType::kF32);
    EXPECT_EQ(cross_entropy(logits, y).dtype(), DType::kF32);
    EXPECT_EQ((logits + matmul(x, w, false, true).to(DType::kF32)).dtype(), DType::kF32)
        << "multi-input ops promote to the widest input";
    EXPECT_EQ((logits * logits).dtype(), low);
    Tensor x64 = x.to(DType::kF64), w64 = w.to(DType::kF64);
    EXPECT_EQ(matmul(x64, w64, false, true).dtype(), DType::kF64) << "f64 is never cast";
    {
      amp::Autocast off(low, /*enabled=*/false);
      EXPECT_FALSE(amp::IsAutocastEnabled());
      EXPECT_EQ(matmul(x, w, false, true).dtype(), DType::kF32);
      {
        amp::Autocast again(DType::kBF16);
        EXPECT_EQ(matmul(x, w, false, true).dtype(), DType::kBF16) << "nested guards";
      }
      EXPECT_EQ(matmul(x, w, false, true).dtype(), DType::kF32) << "inner guard restored";
    }
    EXPECT_EQ(matmul(x, w, false, true).dtype(), low) << "outer guard restored";
  }
  EXPECT_FALSE(amp::IsAutocastEnabled());
  EXPECT_EQ(matmul(x, w, false, true).dtype(), DType::kF32);
  EXPECT_THROW(amp::Autocast bad(DType::kF32), Error);
}

// Master weights stay f32, their grads are f32 and close to the f32 grads.
TEST(AutocastTest, GradientsOfF32ParametersAreF32) {
  manual_seed(3);
  nn::Linear fc(16, 4);
  Generator gen(4);
  Tensor x = randn({8, 16}, {}, &gen);
  Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &gen);
  cross_entropy(fc(x), y).backward();
  std::vector<Tensor> ref;
  for (Tensor& p : fc.parameters()) {
    ref.push_back(p.grad().clone());
    p.set_grad(Tensor());
  }
  Tensor loss;
  {
    amp::Autocast guard(DType::kBF16);
    loss = cross_entropy(fc(x), y);
  }
  EXPECT_EQ(loss.dtype(), DType::kF32);
  loss.backward();
  auto params = fc.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].dtype(), DType::kF32);
    ASSERT_EQ(params[i].grad().dtype(), DType::kF32);
    // bf16 keeps 8 bits of mantissa: 2^-8 relative per rounding, a few roundings.
    const double err = amax(abs(params[i].grad() - ref[i])).item();
    const double scale = amax(abs(ref[i])).item();
    EXPECT_LE(err, 0.03 * scale) << "param " << i;
  }
}

struct TinyMlp {
  nn::Sequential model;
  std::unique_ptr<optim::AdamW> opt;
  Tensor x, y;
};

TinyMlp MakeSetup(uint64_t seed) {
  manual_seed(seed);
  TinyMlp s;
  s.model.push_back(nn::Linear(12, 16));
  s.model.push_back(nn::ReLU());
  s.model.push_back(nn::Linear(16, 3));
  s.opt = std::make_unique<optim::AdamW>(s.model.parameters(), optim::AdamWOptions{.lr = 1e-2});
  Generator gen(seed + 1);
  s.x = randn({10, 12}, {}, &gen);
  s.y = randint(0, 3, {10}, {.dtype = DType::kI64}, &gen);
  return s;
}

std::vector<Tensor> Snapshot(const TinyMlp& s) {
  std::vector<Tensor> out;
  for (const Tensor& p : s.model.parameters()) out.push_back(p.clone());
  for (const Tensor& t : s.opt->state_tensors()) out.push_back(t.clone());
  return out;
}

TEST(GradScalerTest, AnInfGradientSkipsTheStepAndHalvesTheScale) {
  TinyMlp s = MakeSetup(10);
  amp::GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  auto step = [&](bool inject) {
    s.opt->zero_grad();
    Tensor loss = cross_entropy(s.model(s.x), s.y);
    Tensor scaled = scaler.scale(loss);
    EXPECT_EQ(scaled.item(), static_cast<float>(loss.item() * scaler.get_scale()));
    scaled.backward();
    if (inject) {
      Tensor g = s.model.parameters()[2].grad();
      g.mul_(scalar_tensor(std::numeric_limits<double>::infinity()));
    }
    scaler.step(*s.opt);
    scaler.update();
  };
  step(false);  // creates the optimizer state
  ASSERT_EQ(scaler.get_scale(), 65536.0);
  const std::vector<Tensor> before = Snapshot(s);
  step(true);
  const std::vector<Tensor> after = Snapshot(s);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(SameBits(before[i], after[i])) << "tensor " << i << " changed by a skipped step";
  }
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(scaler.last_found_inf().item(), 1.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  step(false);
  EXPECT_EQ(scaler.last_found_inf().item(), 0.0);
  EXPECT_FALSE(SameBits(Snapshot(s)[0], after[0])) << "a clean step updates again";
  EXPECT_EQ(s.opt->step_count().item(), 2.0) << "the skipped step did not count";
}

// A scale so small that unscaling itself overflows (the grads are finite,
// grad / scale is not): the step is skipped, no weight is written with inf.
TEST(GradScalerTest, AnUnscalingThatOverflowsSkipsTheStep) {
  TinyMlp s = MakeSetup(10);
  amp::GradScaler scaler;
  s.opt->zero_grad();
  (cross_entropy(s.model(s.x), s.y) * 1e3).backward();  // finite grads
  Tensor(scaler.scale_tensor()).fill_(1e-37);           // 1 / scale = 1e37
  const std::vector<Tensor> before = Snapshot(s);
  scaler.step(*s.opt);
  scaler.update();
  const std::vector<Tensor> after = Snapshot(s);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(SameBits(before[i], after[i])) << "tensor " << i;
  }
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(scaler.last_found_inf().item(), 1.0);
}

TEST(GradScalerTest, CleanStepsGrowTheScaleEveryGrowthInterval) {
  TinyMlp s = MakeSetup(20);
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  std::vector<double> scales;
  for (int i = 0; i < 7; ++i) {
    s.opt->zero_grad();
    scaler.scale(cross_entropy(s.model(s.x), s.y)).backward();
    scaler.step(*s.opt);
    scaler.update();
    scales.push_back(scaler.get_scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{1024, 1024, 2048, 2048, 2048, 4096, 4096}));
  EXPECT_EQ(scaler.growth_tracker(), 1);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(GradScalerTest, UnscaleThenClipThenStep) {
  TinyMlp s = MakeSetup(30);
  // Reference grads without scaling.
  cross_entropy(s.model(s.x), s.y).backward();
  std::vector<Tensor> ref;
  for (const Tensor& p : s.model.parameters()) ref.push_back(p.grad().clone());
  s.opt->zero_grad();
  amp::GradScaler scaler;
  scaler.scale(cross_entropy(s.model(s.x), s.y)).backward();
  scaler.unscale_(*s.opt);
  // The scale is a power of two: unscaled grads equal the plain ones up to
  // the rounding of the scaled backward (exact in f32 barring underflow).
  auto params = s.model.parameters();
  double ref_sq = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_LE(amax(abs(params[i].grad() - ref[i])).item(), 1e-6 * (1 + amax(abs(ref[i])).item()));
    for (double v : ref[i].to(DType::kF64).to_vector<double>()) ref_sq += v * v;
  }
  const double max_norm = 0.5 * std::sqrt(ref_sq);
  Tensor norm = nn::utils::clip_grad_norm_(params, max_norm);
  EXPECT_NEAR(norm.item(), std::sqrt(ref_sq), 1e-5 * std::sqrt(ref_sq));
  double clipped_sq = 0;
  for (const Tensor& p : params) {
    for (double v : p.grad().to(DType::kF64).to_vector<double>()) clipped_sq += v * v;
  }
  EXPECT_NEAR(std::sqrt(clipped_sq), max_norm, 1e-5 * max_norm);
  EXPECT_THROW(scaler.unscale_(*s.opt), Error) << "unscale_ twice before update()";
  const Tensor w0 = params[0].clone();
  scaler.step(*s.opt);  // does not unscale again
  scaler.update();
  EXPECT_FALSE(SameBits(w0, params[0]));
  EXPECT_EQ(scaler.get_scale(), 65536.0);
}

TEST(GradScalerTest, DisabledScalerIsAPassThroughAndOptionsAreChecked) {
  TinyMlp s = MakeSetup(40);
  amp::GradScaler scaler({.enabled = false});
  Tensor loss = cross_entropy(s.model(s.x), s.y);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_THROW(amp::GradScaler({.growth_factor = 0.5}), Error);
  EXPECT_THROW(amp::GradScaler({.backoff_factor = 1.5}), Error);
  EXPECT_THROW(amp::GradScaler({.init_scale = -1}), Error);
  EXPECT_THROW(amp::GradScaler({.growth_interval = 0}), Error);
  amp::GradScaler fresh;
  EXPECT_THROW(fresh.update(), Error) << "update() with nothing to update";
}

TEST(ClipGradNormTest, MatchesAFloat64Reference) {
  TinyMlp s = MakeSetup(50);
  cross_entropy(s.model(s.x), s.y).backward();
  auto params = s.model.parameters();
  for (double p_norm : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    std::vector<std::vector<double>> g;
    double acc = 0;
    for (const Tensor& p : params) {
      g.push_back(p.grad().to(DType::kF64).to_vector<double>());
      for (double v : g.back()) {
        acc = std::isinf(p_norm) ? std::max(acc, std::abs(v)) : acc + std::pow(std::abs(v), p_norm);
      }
    }
    const double total = std::isinf(p_norm) ? acc : std::pow(acc, 1.0 / p_norm);
    const double max_norm = total / 4;
    std::vector<Tensor> saved;
    for (const Tensor& p : params) saved.push_back(p.grad().clone());
    Tensor norm = nn::utils::clip_grad_norm_(params, max_norm, p_norm);
    EXPECT_NEAR(norm.item(), total, 1e-5 * total) << "p=" << p_norm;
    const double coef = max_norm / (total + 1e-6);
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<double> got = params[i].grad().to(DType::kF64).to_vector<double>();
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_NEAR(got[k], g[i][k] * coef, 1e-6 * std::abs(g[i][k]) + 1e-12);
      }
      params[i].grad().copy_(saved[i]);  // restore for the next norm
    }
  }
  // Below the limit: unchanged.
  Tensor g0 = params[0].grad().clone();
  nn::utils::clip_grad_norm_(params, 1e9);
  EXPECT_TRUE(SameBits(g0, params[0].grad()));
  params[0].grad().mul_(scalar_tensor(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_THROW(nn::utils::clip_grad_norm_(params, 1.0, 2.0, /*error_if_nonfinite=*/true), Error);
  EXPECT_THROW(nn::utils::clip_grad_norm_(params, 1.0, -1.0), Error);
}

// 200 steps of an MLP on a fixed synthetic task with bf16 autocast stay
// close to the f32 run: mean loss over the last 50 steps within 0.05 and
// validation accuracy within 3 points.
TEST(AutocastTest, Bf16TrainingTracksF32) {
  const testing_task::ClassificationTask task =
      testing_task::OverlappingClasses();
  testing_task::ExpectBf16TracksF32("", [&](bool bf16) {
    nn::Sequential model = testing_task::TaskMlp();
    optim::AdamW opt(model.parameters(), {.lr = 3e-3});
    return testing_task::TrainAndEvaluate(
        task, model,
        [&](const Tensor& x, const Tensor& y) {
          opt.zero_grad();
          Tensor loss;
          {
            amp::Autocast guard(DType::kBF16, bf16);
            loss = cross_entropy(model(x), y);
          }
          loss.backward();
          opt.step();
          return loss.item();
        },
        bf16);
  });
}

}  // namespace
}  // namespace stepjit
