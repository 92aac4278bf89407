// Loading a checkpoint under a compiled step: the load copies into the bound
// state in place, so the step keeps replaying (no retrace) and continues
// exactly as an eager run does after the same load.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"

namespace stepjit {
namespace {

std::vector<float> Values(const Tensor& t) {
  return t.contiguous().to(DType::kF32).to_vector<float>();
}

struct Batch {
  Tensor x, y;
};
std::vector<Batch> Batches(int n, uint64_t seed) {
  Generator gen(seed);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({randn({16, 20}, {}, &gen),
                   randint(0, 5, {16}, {.dtype = DType::kI64}, &gen)});
  }
  return out;
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
  auto step = [&compiled](const Tensor& x, const Tensor& y) {
    compiled.opt.zero_grad();
    Tensor loss = cross_entropy(compiled.model(x), y);
    loss.backward();
    compiled.opt.step();
    return loss;
  };
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

}  // namespace
}  // namespace stepjit
