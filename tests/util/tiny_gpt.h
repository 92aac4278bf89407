// A small GPT-style language model from the library's modules (token and
// position embeddings, nn::TransformerBlock, a final LayerNorm and a head)
// and its training step, shared by the CPU and CUDA compiled-vs-eager tests.
#ifndef STEPJIT_TESTS_UTIL_TINY_GPT_H_
#define STEPJIT_TESTS_UTIL_TINY_GPT_H_

#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "tests/util/row_steps.h"

namespace stepjit::test {

class TinyGptImpl : public nn::Module {
 public:
  static constexpr int64_t kVocab = 13, kD = 16, kHeads = 2, kT = 8;
  explicit TinyGptImpl(double dropout) {
    tok = register_module("tok", nn::Embedding(kVocab, kD));
    pos = register_module("pos", nn::Embedding(kT, kD));
    for (int l = 0; l < 2; ++l)
      blocks.push_back(register_module(
          "h" + std::to_string(l),
          nn::TransformerBlock(
              kD, kHeads, nn::TransformerBlockOptions{.dropout = dropout})));
    ln_f = register_module("ln_f", nn::LayerNorm(kD));
    head = register_module("head", nn::Linear(kD, kVocab));
  }
  // tokens [B, T] -> logits [B, T, vocab]; positions [T] on tokens' device.
  Tensor Run(const Tensor& tokens, const Tensor& positions) {
    Tensor x = tok(tokens) + pos(positions);
    for (auto& b : blocks) x = b(x);
    return head(ln_f(x));
  }
  nn::Embedding tok{nullptr}, pos{nullptr};
  std::vector<nn::TransformerBlock> blocks;
  nn::LayerNorm ln_f{nullptr};
  nn::Linear head{nullptr};
};

struct TinyGptRun {
  std::vector<std::vector<float>> values;  // losses, then parameters
  std::string explain;
  CompileStats stats;
};

// `steps` AdamW steps of next-token cross-entropy on random tokens, on
// `device`, compiled or eager, with `amp` autocast (f32: none).
inline TinyGptRun TrainTinyGpt(Device device, bool compiled, DType amp,
                               double dropout, int steps) {
  using M = TinyGptImpl;
  manual_seed(21);
  auto model = std::make_shared<M>(dropout);
  model->to(device);
  optim::AdamW opt(model->parameters(), {.lr = 3e-3});
  std::vector<int64_t> p(M::kT);
  for (int64_t i = 0; i < M::kT; ++i) p[i] = i;
  const Tensor positions =
      from_vector(p, {M::kT}, {.dtype = DType::kI64}).to(device);
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(amp == DType::kF32 ? DType::kBF16 : amp,
                       !compiled && amp != DType::kF32);
      loss = nn::functional::cross_entropy(
          model->Run(x, positions).reshape({-1, M::kVocab}), y.reshape({-1}));
    }
    loss.backward();
    opt.step();
    return loss;
  };
  auto fast = compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager,
                             .amp = compiled ? amp : DType::kF32});
  Generator gen(22);
  TinyGptRun run;
  for (int s = 0; s < steps; ++s) {
    const Tensor seq =
        randint(0, M::kVocab, {4, M::kT + 1}, {.dtype = DType::kI64}, &gen);
    const Tensor x = seq.slice(1, 0, M::kT).contiguous().to(device);
    const Tensor y = seq.slice(1, 1, M::kT + 1).contiguous().to(device);
    run.values.push_back(HostValues(fast(x, y)));
  }
  for (const Tensor& t : model->parameters())
    run.values.push_back(HostValues(t));
  run.explain = fast.explain();
  run.stats = fast.stats();
  return run;
}

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_TINY_GPT_H_
