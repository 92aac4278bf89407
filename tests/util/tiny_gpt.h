// A small nn::GPT (token and position embeddings, two nn::TransformerBlocks,
// a final LayerNorm and a head) and its training step, shared by the CPU and
// CUDA compiled-vs-eager tests.
#ifndef STEPJIT_TESTS_UTIL_TINY_GPT_H_
#define STEPJIT_TESTS_UTIL_TINY_GPT_H_

#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "tests/util/row_steps.h"

namespace stepjit::test {

// The model's sizes.
struct TinyGpt {
  static constexpr int64_t kVocab = 13, kD = 16, kHeads = 2, kT = 8;
};

struct TinyGptRun {
  std::vector<std::vector<float>> values;  // losses, then parameters
  std::string explain;
  CompileStats stats;
};

// `steps` AdamW steps of next-token cross-entropy on random tokens, on
// `device`, compiled or eager, with `amp` autocast (f32: none); compiled
// CUDA steps replay as CUDA graphs unless `cuda_graphs` is false.
inline TinyGptRun TrainTinyGpt(Device device, bool compiled, DType amp,
                               double dropout, int steps,
                               bool cuda_graphs = true) {
  using M = TinyGpt;
  manual_seed(21);
  nn::GPT model(nn::GPTOptions{.vocab = M::kVocab,
                               .context = M::kT,
                               .d_model = M::kD,
                               .heads = M::kHeads,
                               .layers = 2,
                               .dropout = dropout});
  model->to(device);
  optim::AdamW opt(model->parameters(), {.lr = 3e-3});
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(amp == DType::kF32 ? DType::kBF16 : amp,
                       !compiled && amp != DType::kF32);
      loss = nn::functional::cross_entropy(model(x).reshape({-1, M::kVocab}),
                                           y.reshape({-1}));
    }
    loss.backward();
    opt.step();
    return loss;
  };
  auto fast = compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager,
                             .amp = compiled ? amp : DType::kF32,
                             .cuda_graphs = cuda_graphs});
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
