// A compiled sampling step (temperature softmax, top-k, multinomial over the
// kept weights, as a language model samples its next token) against the
// eager step: the same draws under the same seeds, fresh draws on every call
// (the tracer records topk and multinomial; nothing runs stale), and a
// compiled topk whose values get a gradient.
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"

namespace stepjit {
namespace {

std::vector<int64_t> Indices(const Tensor& t) {
  return t.contiguous().to_vector<int64_t>();
}

// [batch, k + samples]: the top-k token ids, then the positions drawn among
// them.
Tensor SampleStep(const Tensor& logits, const Tensor& temperature) {
  const Tensor probs = softmax(logits / temperature, -1);
  const TopK top = topk(probs, 5);
  const Tensor pick = multinomial(top.values, 2);
  const Tensor with = multinomial(top.values, 3, /*replacement=*/true);
  return cat({top.indices, pick, with}, -1);
}

TEST(SamplingStepTest, CompiledDrawsEqualEagerAndChangeEveryCall) {
  Generator gen(1);
  const Tensor logits = randn({6, 40}, {}, &gen) * 3.0;
  auto run = [&](bool compiled) {
    auto fast = compile(SampleStep,
                        {.mode = compiled ? Mode::kCompiled : Mode::kEager});
    std::vector<std::vector<int64_t>> out;
    for (int i = 0; i < 8; ++i) {
      if (i % 2 == 0)
        manual_seed(900 + i);              // the second call of a pair moves on
      const double t = i < 4 ? 1.0 : 0.5;  // a changed host value
      out.push_back(Indices(fast(logits, scalar_tensor(t))));
    }
    if (compiled) {
      const CompileStats s = fast.stats();
      EXPECT_GE(s.replays, 4);
      EXPECT_EQ(s.traces, 1);
      EXPECT_EQ(s.fallbacks, 0);
      EXPECT_EQ(s.interpreted_regions, 0);
    }
    return out;
  };
  const auto eager = run(false), compiled = run(true);
  ASSERT_EQ(eager.size(), compiled.size());
  for (size_t i = 0; i < eager.size(); ++i)
    EXPECT_EQ(eager[i], compiled[i]) << "call " << i;
  // Two calls after one seed draw differently (the stream moves on).
  int differing = 0;
  for (size_t i = 0; i < eager.size(); i += 2)
    differing += eager[i] != eager[i + 1];
  EXPECT_GE(differing, 3);
  // The draws are positions among the 5 kept tokens, distinct without
  // replacement.
  for (const std::vector<int64_t>& o : compiled) {
    for (size_t r = 0; r < 6; ++r) {
      const int64_t* row = o.data() + r * 10;
      EXPECT_NE(row[5], row[6]);
      for (int j = 5; j < 10; ++j) {
        EXPECT_GE(row[j], 0);
        EXPECT_LT(row[j], 5);
      }
    }
  }
}

TEST(SamplingStepTest, CompiledTopkValuesTrainLikeEager) {
  // A step whose loss is the sum of each row's 3 largest scores: only the
  // selected positions get a gradient.
  auto run = [](bool compiled) {
    Generator gen(4);
    Tensor w = randn({8, 12}, {}, &gen).set_requires_grad(true);
    const Tensor x = randn({5, 8}, {}, &gen);
    auto step = [&](const Tensor& in) {
      if (w.grad().defined()) w.grad().zero_();
      Tensor loss = sum(topk(matmul(in, w), 3).values);
      loss.backward();
      NoGradGuard ng;
      w.add_(w.grad(), -0.1);
      return loss;
    };
    auto fast =
        compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager});
    std::vector<float> losses;
    for (int i = 0; i < 5; ++i)
      losses.push_back(static_cast<float>(fast(x).item()));
    std::vector<float> out = w.to_vector<float>();
    out.insert(out.end(), losses.begin(), losses.end());
    return out;
  };
  const std::vector<float> eager = run(false), compiled = run(true);
  ASSERT_EQ(eager.size(), compiled.size());
  for (size_t i = 0; i < eager.size(); ++i)
    EXPECT_NEAR(eager[i], compiled[i], 1e-5) << i;
}

}  // namespace
}  // namespace stepjit
