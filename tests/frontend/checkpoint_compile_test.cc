// Loading a checkpoint under a compiled step: the load copies into the bound
// state in place, so the step keeps replaying (no retrace) and continues
// exactly as an eager run does after the same load.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/util/train_step.h"

namespace stepjit {
namespace {

std::vector<float> Values(const Tensor& t) {
  return t.contiguous().to(DType::kF32).to_vector<float>();
}

using test::Batch;
std::vector<Batch> Batches(int n, uint64_t seed) {
  return test::RandomBatches(n, seed, /*rows=*/16, /*features=*/20,
                             /*classes=*/5);
}

struct Trainer {
  nn::Sequential model;
  optim::AdamW opt;
  explicit Trainer(uint64_t seed)
      : model([seed] {
          manual_seed(seed);
          return nn::Sequential(nn::Linear(20, 32), nn::ReLU(),
                                nn::Linear(32, 5));
        }()),
        opt(model.parameters(), {.lr = 1e-2}) {}
  TrainingState state() { return {.model = model.ptr(), .optimizer = &opt}; }
};

TEST(CheckpointCompileTest, CompiledStepAfterLoadContinuesLikeEager) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("stepjit_ckpt_compile_" + std::to_string(::getpid())))
          .string();
  {  // The checkpoint: 4 eager steps from seed 1.
    Trainer saved(1);
    for (const Batch& b : Batches(4, 5)) {
      saved.opt.zero_grad();
      cross_entropy(saved.model(b.x), b.y).backward();
      saved.opt.step();
    }
    ASSERT_TRUE(SaveCheckpoint(path, saved.state()).ok());
  }
  const std::vector<Batch> after = Batches(5, 6);
  // Compiled from seed 2: traced and replaying before the load.
  Trainer compiled(2);
  auto step = test::CrossEntropyStep(compiled.model, compiled.opt);
  auto fast = compile(step);
  for (const Batch& b : Batches(5, 7)) fast(b.x, b.y);
  ASSERT_EQ(fast.stats().replays, 3);
  const absl::Status s = LoadCheckpoint(path, compiled.state());
  ASSERT_TRUE(s.ok()) << s;
  std::vector<std::vector<float>> got;
  for (const Batch& b : after) got.push_back(Values(fast(b.x, b.y)));
  EXPECT_EQ(fast.stats().traces, 1) << fast.explain();
  EXPECT_EQ(fast.stats().replays, 8) << fast.explain();

  // Eager from seed 3, loaded the same way.
  Trainer eager(3);
  ASSERT_TRUE(LoadCheckpoint(path, eager.state()).ok());
  std::vector<std::vector<float>> want;
  for (const Batch& b : after) {
    eager.opt.zero_grad();
    Tensor loss = cross_entropy(eager.model(b.x), b.y);
    loss.backward();
    eager.opt.step();
    want.push_back(Values(loss));
  }
  EXPECT_EQ(got, want);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(Values(compiled.model.parameters()[i]),
              Values(eager.model.parameters()[i]))
        << i;
    EXPECT_EQ(Values(compiled.opt.state(i).exp_avg_sq),
              Values(eager.opt.state(i).exp_avg_sq))
        << i;
  }
  EXPECT_EQ(compiled.opt.step_count().item<float>(), 9.0f);
  std::remove(path.c_str());
}

// Under {.amp = kBF16} a replay reads bf16 copies of the weights; a load
// moves the weights' versions, so the next replay converts them again and
// computes with the loaded values, not the stale copies.
TEST(CheckpointCompileTest, AmpWeightCopiesFollowALoad) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("stepjit_ckpt_amp_" + std::to_string(::getpid())))
                               .string();
  {  // Weights far from the compiled model's: seed 1, tripled.
    Trainer saved(1);
    NoGradGuard no_grad;
    for (const Tensor& p : saved.model.parameters()) Tensor(p).mul_(3.0);
    ASSERT_TRUE(SaveCheckpoint(path, {.model = saved.model.ptr()}).ok());
  }
  Trainer compiled(2);
  auto step = test::CrossEntropyStep(compiled.model, compiled.opt);
  auto fast = compile(step, {.amp = DType::kBF16});
  for (const Batch& b : Batches(4, 7)) fast(b.x, b.y);
  ASSERT_EQ(fast.stats().replays, 2);
  const Batch b = Batches(1, 8)[0];
  // The loss the next step would compute without the load (a stale copy).
  double stale = 0;
  {
    NoGradGuard no_grad;
    amp::Autocast autocast(DType::kBF16);
    stale = cross_entropy(compiled.model(b.x), b.y).item();
  }
  ASSERT_TRUE(LoadCheckpoint(path, {.model = compiled.model.ptr()}).ok());
  const double replayed = fast(b.x, b.y).item();
  EXPECT_EQ(fast.stats().replays, 3) << fast.explain();

  Trainer reference(4);
  ASSERT_TRUE(LoadCheckpoint(path, {.model = reference.model.ptr()}).ok());
  double want = 0;
  {
    NoGradGuard no_grad;
    amp::Autocast autocast(DType::kBF16);
    want = cross_entropy(reference.model(b.x), b.y).item();
  }
  // bf16 rounding of eager autocast vs the compiled graph: 1e-2 relative;
  // the stale weights are much further off.
  EXPECT_NEAR(replayed, want, 1e-2 * want);
  EXPECT_GT(std::abs(stale - want), 0.2 * want)
      << "the test must tell them apart";
  std::remove(path.c_str());
}

}  // namespace
}  // namespace stepjit
