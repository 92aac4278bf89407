// Compiled training steps whose regions hold row reductions (softmax,
// layer_norm, cross_entropy and their backward patterns): every region runs
// as generated code on the CPU (explain() lists none interpreted), and
// losses and parameters follow the eager step over several steps.
//
// Tolerances: the compiled step's regions differ from eager only in
// summation order and the exp/log implementation (row reductions in f64, a
// few ulps in f32); over 5 AdamW steps that stays below 1e-4 relative (+1e-5
// absolute) in f32. With bf16 autocast, a last-bit difference in a bf16
// matmul input may round differently, so 2e-2 relative (+1e-3) is allowed.
#include <cmath>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"

namespace stepjit {
namespace {

std::vector<float> Values(const Tensor& t) {
  return t.contiguous().to(DType::kF32).to_vector<float>();
}

void ExpectNear(const std::vector<std::vector<float>>& got,
                const std::vector<std::vector<float>>& want, double rtol,
                double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << "tensor " << k;
    int bad = 0;
    for (size_t i = 0; i < got[k].size() && bad < 5; ++i) {
      if (std::abs(got[k][i] - want[k][i]) >
          rtol * std::abs(want[k][i]) + atol) {
        ADD_FAILURE() << "tensor " << k << " [" << i << "]: " << got[k][i]
                      << " vs eager " << want[k][i];
        ++bad;
      }
    }
  }
}

// explain() says how many regions ran interpreted; none may.
void ExpectNoneInterpreted(const std::string& explain) {
  EXPECT_NE(explain.find(" 0 interpreted"), std::string::npos) << explain;
  EXPECT_EQ(explain.find("runs interpreted"), std::string::npos) << explain;
  EXPECT_EQ(explain.find(" 0 regions run as generated code"), std::string::npos)
      << explain;
}

// The Fashion-MNIST step (examples/fashion_mnist.cc) at a smaller width:
// MLP, cross-entropy, SGD or AdamW, optionally compiled with bf16 autocast.
template <typename Opt, typename Options>
std::vector<std::vector<float>> TrainMlp(bool compiled, Options o, DType amp,
                                         std::string* explain) {
  manual_seed(11);
  nn::Sequential model(nn::Linear(784, 64), nn::ReLU(), nn::Linear(64, 64),
                       nn::ReLU(), nn::Linear(64, 10));
  Opt opt(model.parameters(), o);
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    if (!compiled && amp != DType::kF32) {
      amp::Autocast ac(amp);
      loss = nn::functional::cross_entropy(model(x), y);
    } else {
      loss = nn::functional::cross_entropy(model(x), y);
    }
    loss.backward();
    opt.step();
    return loss;
  };
  auto fast = compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager,
                             .amp = compiled ? amp : DType::kF32});
  Generator gen(5);
  std::vector<std::vector<float>> out;
  for (int s = 0; s < 5; ++s) {
    Tensor x = randn({32, 784}, {}, &gen);
    Tensor y = randint(0, 10, {32}, {.dtype = DType::kI64}, &gen);
    out.push_back(Values(fast(x, y)));
  }
  for (const Tensor& p : model.parameters()) out.push_back(Values(p));
  if (explain) *explain = fast.explain();
  return out;
}

TEST(RowRegionsTest, FashionMnistStepRunsNoRegionInterpreted) {
  std::string explain;
  ExpectNear(TrainMlp<optim::AdamW>(true, optim::AdamWOptions{.lr = 1e-3},
                                    DType::kF32, &explain),
             TrainMlp<optim::AdamW>(false, optim::AdamWOptions{.lr = 1e-3},
                                    DType::kF32, nullptr),
             1e-4, 1e-5);
  ExpectNoneInterpreted(explain);
  ExpectNear(TrainMlp<optim::SGD>(true, optim::SGDOptions{.lr = 0.05},
                                  DType::kF32, &explain),
             TrainMlp<optim::SGD>(false, optim::SGDOptions{.lr = 0.05},
                                  DType::kF32, nullptr),
             1e-4, 1e-5);
  ExpectNoneInterpreted(explain);
}

// With bf16 autocast, AdamW's sign-like first steps turn a last-bit
// difference in a near-zero bf16 gradient into a full lr-sized one, so the
// numbers are compared under SGD; AdamW is checked for interpreted regions.
TEST(RowRegionsTest, FashionMnistBf16StepRunsNoRegionInterpreted) {
  std::string explain;
  ExpectNear(TrainMlp<optim::SGD>(true, optim::SGDOptions{.lr = 0.05},
                                  DType::kBF16, &explain),
             TrainMlp<optim::SGD>(false, optim::SGDOptions{.lr = 0.05},
                                  DType::kBF16, nullptr),
             2e-2, 1e-3);
  ExpectNoneInterpreted(explain);
  TrainMlp<optim::AdamW>(true, optim::AdamWOptions{.lr = 1e-3}, DType::kBF16,
                         &explain);
  ExpectNoneInterpreted(explain);
}

// A pre-LN transformer block: LayerNorm -> causal single-head attention
// (matmul, scale, mask with where, softmax) -> residual -> LayerNorm ->
// Linear+GELU+Linear -> residual, then a vocabulary head and cross-entropy
// over every position, trained with AdamW.
struct Block {
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
  Tensor operator()(const Tensor& x, const Tensor& mask) {
    Tensor h = ln1(x);
    Tensor s = matmul(q(h), k(h), false, true) * (1.0 / std::sqrt(kD));
    s = where(mask, s, full({}, -1e9));
    Tensor a = matmul(softmax(s, -1), v(h));
    Tensor r = x + o(a);
    Tensor f = fc2(gelu(fc1(ln2(r))));
    return head(r + f);
  }
  nn::LayerNorm ln1{kD}, ln2{kD};
  nn::Linear q{kD, kD}, k{kD, kD}, v{kD, kD}, o{kD, kD}, fc1{kD, 4 * kD},
      fc2{4 * kD, kD}, head{kD, kVocab};
};

std::vector<std::vector<float>> TrainBlock(bool compiled,
                                           std::string* explain) {
  constexpr int64_t kT = 12;
  manual_seed(3);
  Block block;
  optim::AdamW opt(block.parameters(), {.lr = 1e-3});
  std::vector<float> causal(kT * kT);
  for (int64_t i = 0; i < kT; ++i)
    for (int64_t j = 0; j < kT; ++j) causal[i * kT + j] = j <= i ? 1 : 0;
  const Tensor mask = gt(from_vector(causal, {kT, kT}), full({}, 0.5));
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor logits = block(x, mask);
    Tensor loss =
        nn::functional::cross_entropy(logits.reshape({kT, Block::kVocab}), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto fast =
      compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager});
  Generator gen(9);
  std::vector<std::vector<float>> out;
  for (int s = 0; s < 5; ++s) {
    Tensor x = randn({kT, Block::kD}, {}, &gen);
    Tensor y = randint(0, Block::kVocab, {kT}, {.dtype = DType::kI64}, &gen);
    out.push_back(Values(fast(x, y)));
  }
  for (const Tensor& p : block.parameters()) out.push_back(Values(p));
  if (explain) *explain = fast.explain();
  return out;
}

TEST(RowRegionsTest, TransformerBlockStepRunsNoRegionInterpreted) {
  std::string explain;
  ExpectNear(TrainBlock(true, &explain), TrainBlock(false, nullptr), 1e-4,
             1e-5);
  ExpectNoneInterpreted(explain);
}

// A region no CPU kernel is generated for (integer arithmetic fused with the
// cast that follows it) runs interpreted, and explain() says why.
TEST(RowRegionsTest, ExplainListsAnInterpretedRegionWithItsReason) {
  Tensor w = ones({8});
  auto step = [&](const Tensor& x, const Tensor& y) {
    return sum(x * ((y + y) * w));
  };
  auto fast = compile(step);
  Generator gen(2);
  const Tensor x = randn({8}, {}, &gen);
  const Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &gen);
  for (int s = 0; s < 3; ++s) fast(x, y);
  const std::string explain = fast.explain();
  EXPECT_NE(explain.find("runs interpreted: dtype i64"), std::string::npos)
      << explain;
  EXPECT_NE(explain.find(" 1 interpreted"), std::string::npos) << explain;
}

}  // namespace
}  // namespace stepjit
