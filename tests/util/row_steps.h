// Training steps whose compiled regions hold row reductions (softmax,
// layer_norm, cross_entropy and their backward patterns), shared by the CPU
// (tests/frontend/row_regions_test.cc) and CUDA
// (tests/cuda/compiled_rows_test.cc) checks: the Fashion-MNIST MLP step and
// a pre-LN transformer block step, each returning its losses and final
// parameters, and the comparisons they are checked with.
#ifndef STEPJIT_TESTS_UTIL_ROW_STEPS_H_
#define STEPJIT_TESTS_UTIL_ROW_STEPS_H_

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/util/train_step.h"

namespace stepjit::test {

// `t` on the host as f32 values.
inline std::vector<float> HostValues(const Tensor& t) {
  return t.to(Device::cpu()).contiguous().to(DType::kF32).to_vector<float>();
}

// |got - want| <= rtol * |want| + atol for every value of every tensor.
inline void ExpectNear(const std::vector<std::vector<float>>& got,
                       const std::vector<std::vector<float>>& want, double rtol,
                       double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << "tensor " << k;
    int bad = 0;
    for (size_t i = 0; i < got[k].size() && bad < 5; ++i) {
      if (!(std::abs(got[k][i] - want[k][i]) <=
            rtol * std::abs(want[k][i]) + atol)) {
        ADD_FAILURE() << "tensor " << k << " [" << i << "]: " << got[k][i]
                      << " vs eager " << want[k][i];
        ++bad;
      }
    }
  }
}

// explain() says how many regions ran interpreted; none may.
inline void ExpectNoneInterpreted(const std::string& explain) {
  EXPECT_NE(explain.find(" 0 interpreted"), std::string::npos) << explain;
  EXPECT_EQ(explain.find("runs interpreted"), std::string::npos) << explain;
  EXPECT_EQ(explain.find(" 0 regions run as generated code"), std::string::npos)
      << explain;
}

// Trains with cross-entropy over `forward`'s logits and `opt` on each
// (x, y) of `batches`, compiled or eager; with `amp` not f32 the compiled
// step is compiled with that autocast and the eager one runs under
// amp::Autocast. Returns the losses, then `params` after the last step.
template <typename Forward>
std::vector<std::vector<float>> TrainCrossEntropy(
    Forward&& forward, optim::Optimizer& opt, const std::vector<Tensor>& params,
    bool compiled, DType amp,
    const std::vector<std::pair<Tensor, Tensor>>& batches, std::string* explain,
    CompileStats* stats = nullptr) {
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(amp == DType::kF32 ? DType::kBF16 : amp,
                       !compiled && amp != DType::kF32);
      loss = nn::functional::cross_entropy(forward(x), y);
    }
    loss.backward();
    opt.step();
    return loss;
  };
  auto fast = compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager,
                             .amp = compiled ? amp : DType::kF32});
  std::vector<std::vector<float>> out;
  for (const auto& [x, y] : batches) out.push_back(HostValues(fast(x, y)));
  for (const Tensor& p : params) out.push_back(HostValues(p));
  if (explain) *explain = fast.explain();
  if (stats) *stats = fast.stats();
  return out;
}

// The Fashion-MNIST step (examples/fashion_mnist.cc) at a smaller width on
// `device`: MLP, cross-entropy, optimizer `Opt`; with `amp` not f32, the
// compiled step is compiled with that autocast and the eager one runs under
// amp::Autocast. Returns the 5 losses, then the final parameters.
template <typename Opt, typename Options>
std::vector<std::vector<float>> TrainMlp(Device device, bool compiled,
                                         Options o, DType amp,
                                         std::string* explain) {
  manual_seed(11);
  nn::Sequential model(nn::Linear(784, 64), nn::ReLU(), nn::Linear(64, 64),
                       nn::ReLU(), nn::Linear(64, 10));
  model->to(device);
  Opt opt(model.parameters(), o);
  Generator gen(5);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int s = 0; s < 5; ++s) {
    Tensor x = randn({32, 784}, {}, &gen).to(device);
    Tensor y = randint(0, 10, {32}, {.dtype = DType::kI64}, &gen).to(device);
    batches.emplace_back(x, y);
  }
  return TrainCrossEntropy([&](const Tensor& x) { return model(x); }, opt,
                           model.parameters(), compiled, amp, batches, explain);
}

// A pre-LN transformer block: LayerNorm -> causal single-head attention
// (matmul, scale, mask with where, softmax) -> residual -> LayerNorm ->
// Linear+GELU+Linear -> residual, then a vocabulary head.
struct TransformerBlock {
  static constexpr int64_t kD = 32, kVocab = 11;
  std::vector<Tensor> parameters() {
    std::vector<Tensor> ps;
    for (const auto& group :
         {ln1.parameters(), ln2.parameters(), q.parameters(), k.parameters(),
          v.parameters(), o.parameters(), fc1.parameters(), fc2.parameters(),
          head.parameters()}) {
      ps.insert(ps.end(), group.begin(), group.end());
    }
    return ps;
  }
  void to(Device d) {
    ln1->to(d), ln2->to(d), q->to(d), k->to(d), v->to(d), o->to(d), fc1->to(d),
        fc2->to(d), head->to(d);
  }
  Tensor operator()(const Tensor& x, const Tensor& mask) {
    Tensor h = ln1(x);
    Tensor s = matmul(q(h), k(h), false, true) * (1.0 / std::sqrt(kD));
    s = where(mask, s, full({}, -1e9, {.device = x.device()}));
    Tensor a = matmul(softmax(s, -1), v(h));
    Tensor r = x + o(a);
    Tensor f = fc2(gelu(fc1(ln2(r))));
    return head(r + f);
  }
  nn::LayerNorm ln1{kD}, ln2{kD};
  nn::Linear q{kD, kD}, k{kD, kD}, v{kD, kD}, o{kD, kD}, fc1{kD, 4 * kD},
      fc2{4 * kD, kD}, head{kD, kVocab};
};

// The block trained with cross-entropy over every position and AdamW on
// `device`: the 5 losses, then the final parameters.
inline std::vector<std::vector<float>> TrainBlock(Device device, bool compiled,
                                                  std::string* explain) {
  constexpr int64_t kT = 12;
  manual_seed(3);
  TransformerBlock block;
  block.to(device);
  optim::AdamW opt(block.parameters(), {.lr = 1e-3});
  std::vector<float> causal(kT * kT);
  for (int64_t i = 0; i < kT; ++i)
    for (int64_t j = 0; j < kT; ++j) causal[i * kT + j] = j <= i ? 1 : 0;
  const Tensor mask =
      gt(from_vector(causal, {kT, kT}), full({}, 0.5)).to(device);
  auto step = OptimizerStep(opt, [&](const Tensor& x, const Tensor& y) {
    Tensor logits = block(x, mask);
    return nn::functional::cross_entropy(
        logits.reshape({kT, TransformerBlock::kVocab}), y);
  });
  auto fast =
      compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager});
  Generator gen(9);
  std::vector<std::vector<float>> out;
  for (int s = 0; s < 5; ++s) {
    Tensor x = randn({kT, TransformerBlock::kD}, {}, &gen).to(device);
    Tensor y =
        randint(0, TransformerBlock::kVocab, {kT}, {.dtype = DType::kI64}, &gen)
            .to(device);
    out.push_back(HostValues(fast(x, y)));
  }
  for (const Tensor& p : block.parameters()) out.push_back(HostValues(p));
  if (explain) *explain = fast.explain();
  return out;
}

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_ROW_STEPS_H_
