// A small GPT built from nn::TransformerBlock (causal multi-head attention
// through scaled_dot_product_attention, pre-LN, GELU MLP, dropout) trained
// for 30 AdamW steps, compiled against eager on the CPU: losses and
// parameters within tolerance, no region interpreted, the 3-d Linear layers'
// bias in their GEMM epilogues; and a module whose forward takes several
// tensors.
//
// Tolerances: f32 1e-4 relative + 1e-5 (summation order and exp/log
// implementation, compounded over 30 AdamW steps); bf16 autocast compares
// losses only, 2e-2 relative + 2e-2 (a last-bit difference in a bf16 matmul
// input rounds differently and AdamW's normalized updates carry it).
#include <string>

#include "gtest/gtest.h"
#include "tests/util/tiny_gpt.h"
#include "tests/util/train_step.h"

namespace stepjit {
namespace {

const Device kCpu = Device::cpu();

int Absorbed(const std::string& passes) {
  const std::string key = "gemm epilogues absorbed=";
  const size_t at = passes.find(key);
  return at == std::string::npos ? 0
                                 : std::stoi(passes.substr(at + key.size()));
}

// The tiny GPT trained for 30 steps with `dropout`, compiled and eagerly:
// within 1e-4 (+1e-5) and no region interpreted; returns the compiled run.
test::TinyGptRun ExpectCompiledFollowsEager(double dropout) {
  const test::TinyGptRun got =
      test::TrainTinyGpt(kCpu, true, DType::kF32, dropout, 30);
  const test::TinyGptRun want =
      test::TrainTinyGpt(kCpu, false, DType::kF32, dropout, 30);
  test::ExpectNear(got.values, want.values, 1e-4, 1e-5);
  test::ExpectNoneInterpreted(got.explain);
  return got;
}

TEST(TransformerStepTest, CompiledFollowsEagerForThirtySteps) {
  const test::TinyGptRun got = ExpectCompiledFollowsEager(0.0);
  EXPECT_EQ(got.stats.traces, 1) << got.explain;
  // qkv, out_proj, fc1, fc2 of both blocks and the head take their bias.
  EXPECT_GE(Absorbed(got.stats.passes), 9) << got.stats.passes;
}

TEST(TransformerStepTest, CompiledWithDropoutFollowsEager) {
  ExpectCompiledFollowsEager(0.1);
}

TEST(TransformerStepTest, CompiledBf16FollowsEagerAutocast) {
  test::TinyGptRun got = test::TrainTinyGpt(kCpu, true, DType::kBF16, 0.0, 30);
  test::TinyGptRun want =
      test::TrainTinyGpt(kCpu, false, DType::kBF16, 0.0, 30);
  got.values.resize(30);
  want.values.resize(30);
  test::ExpectNear(got.values, want.values, 2e-2, 2e-2);
  test::ExpectNoneInterpreted(got.explain);
}

// A module whose forward takes several tensors, called through its holder
// and compiled: attention over a query, key/value memory and a key mask.
class CrossAttentionImpl : public nn::Module {
 public:
  explicit CrossAttentionImpl(int64_t d) {
    q = register_module("q", nn::Linear(d, d));
    kv = register_module("kv", nn::Linear(d, 2 * d));
  }
  Tensor forward(const Tensor& x, const Tensor& memory, const Tensor& keep) {
    const std::vector<Tensor> k_v = chunk(kv(memory), 2, -1);
    return nn::functional::scaled_dot_product_attention(q(x), k_v[0], k_v[1],
                                                        false, 0.0, keep);
  }
  nn::Linear q{nullptr}, kv{nullptr};
};
using CrossAttention = nn::ModuleHolder<CrossAttentionImpl>;

std::vector<std::vector<float>> TrainCrossAttention(bool compiled) {
  manual_seed(31);
  CrossAttention attn(8);
  optim::SGD opt(attn.parameters(), {.lr = 0.1});
  const Tensor keep =
      gt(from_vector(std::vector<float>{1, 1, 0, 1, 0}, {1, 5}), full({}, 0.5));
  auto step =
      test::OptimizerStep(opt, [&](const Tensor& x, const Tensor& memory) {
        return mean(attn(x, memory, keep) * x);
      });
  auto fast =
      compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager});
  Generator gen(32);
  std::vector<std::vector<float>> out;
  for (int s = 0; s < 6; ++s)
    out.push_back(test::HostValues(
        fast(randn({3, 8}, {}, &gen), randn({5, 8}, {}, &gen))));
  for (const Tensor& p : attn.parameters()) out.push_back(test::HostValues(p));
  return out;
}

TEST(TransformerStepTest, ModuleWithSeveralTensorInputsCompiles) {
  test::ExpectNear(TrainCrossAttention(true), TrainCrossAttention(false), 1e-4,
                   1e-5);
}

}  // namespace
}  // namespace stepjit
