// Tests nn::Module registration and traversal, in-place to(), and the layers
// against float64 references.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/status.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "training/nn/functional.h"
#include "training/nn/layers.h"
#include "training/nn/module.h"

namespace stepjit::nn {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A module mixing a direct parameter with nested submodules; "scale" is
// registered after "fc1" yet comes first, as in PyTorch.
struct Net : Module {
  Net() {
    fc1 = register_module("fc1", Linear(3, 4));
    scale = register_parameter("scale", ones({1}));
    seq =
        register_module("seq", Sequential(Linear(4, 2), ReLU(), Linear(2, 1)));
  }
  Tensor forward(const Tensor& x) override { return seq(fc1(x)) * scale; }

  Linear fc1{nullptr};
  Sequential seq{nullptr};
  Tensor scale;
};

std::vector<std::string> Names(const Module::NamedTensors& named) {
  std::vector<std::string> names;
  for (const auto& [name, t] : named) names.push_back(name);
  return names;
}

std::vector<double> AsDoubles(const Tensor& t) {
  const std::vector<float> v = t.contiguous().to_vector<float>();
  return {v.begin(), v.end()};
}

TEST(NnModuleTest, NamedParametersAreDottedInRegistrationOrder) {
  Net net;
  EXPECT_THAT(Names(net.named_parameters()),
              ElementsAre("scale", "fc1.weight", "fc1.bias", "seq.0.weight",
                          "seq.0.bias", "seq.2.weight", "seq.2.bias"));
  EXPECT_THAT(Names(net.named_parameters(/*recurse=*/false)),
              ElementsAre("scale"));
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(NnModuleTest, ParametersShareTheModulesImpls) {
  Net net;
  const std::vector<Tensor> params = net.parameters();
  ASSERT_EQ(params.size(), 7u);
  EXPECT_EQ(params[0].impl(), net.scale.impl());
  EXPECT_EQ(params[1].impl(), net.fc1->weight.impl());
  EXPECT_EQ(params[2].impl(), net.fc1->bias.impl());
  EXPECT_EQ(params[3].impl(), net.seq.at<LinearImpl>(0)->weight.impl());
}

TEST(NnModuleTest, TiedParameterIsListedOnce) {
  Sequential model(Linear(3, 3), Linear(3, 3));
  model.at<LinearImpl>(1)->register_parameter("tied",
                                              model.at<LinearImpl>(0)->weight);
  EXPECT_THAT(Names(model.named_parameters()),
              ElementsAre("0.weight", "0.bias", "1.weight", "1.bias"));
}

TEST(NnModuleTest, RejectsDuplicateAndDottedNames) {
  Module m;
  m.register_parameter("w", zeros({2}));
  EXPECT_THROW(m.register_parameter("w", zeros({2})), Error);
  EXPECT_THROW(m.register_module("w", Linear(2, 2)), Error);
  EXPECT_THROW(m.register_parameter("a.b", zeros({2})), Error);
}

TEST(NnModuleTest, ToDTypeConvertsInPlaceKeepingIdentity) {
  manual_seed(7);
  Net net;
  const std::vector<Tensor> before = net.parameters();
  std::vector<std::vector<double>> values;
  for (const Tensor& p : before) values.push_back(AsDoubles(p));
  before[1].set_grad(ones({4, 3}));

  net.to(DType::kF64);
  const std::vector<Tensor> after = net.parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].impl(), before[i].impl()) << i;
    EXPECT_EQ(before[i].dtype(), DType::kF64) << i;
    EXPECT_TRUE(before[i].requires_grad()) << i;
    // f32 -> f64 is exact.
    EXPECT_EQ(before[i].contiguous().to_vector<double>(), values[i]) << i;
  }
  EXPECT_EQ(before[1].grad().dtype(), DType::kF64);
  EXPECT_EQ(net.fc1->weight.dtype(), DType::kF64);
  // The converted model still runs and produces f64.
  EXPECT_EQ(net(ones({2, 3}, {.dtype = DType::kF64})).dtype(), DType::kF64);
  EXPECT_THROW(net.to(DType::kI64), Error);
}

TEST(NnModuleTest, TrainAndEvalRecurse) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.fc1.is_training());
  EXPECT_FALSE(net.seq[1]->is_training());
  net.train();
  EXPECT_TRUE(net.seq.at<ReLUImpl>(1)->is_training());
}

TEST(NnModuleTest, ZeroGradSetsToNoneOrZeroes) {
  Linear fc(2, 2);
  fc->weight.set_grad(ones({2, 2}));
  const Tensor grad = fc->weight.grad();
  fc.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(fc->weight.grad().is_same(grad));
  EXPECT_THAT(AsDoubles(grad), ElementsAre(0, 0, 0, 0));
  fc.zero_grad();
  EXPECT_FALSE(fc->weight.grad().defined());
}

TEST(NnLayersTest, LinearForwardMatchesFloat64Loop) {
  manual_seed(1);
  Linear fc(5, 3);
  const Tensor x = randn({4, 5});
  const std::vector<double> w = AsDoubles(fc->weight);
  const std::vector<double> b = AsDoubles(fc->bias);
  const std::vector<double> xv = AsDoubles(x);
  const std::vector<double> y = AsDoubles(fc(x));
  ASSERT_EQ(y.size(), 12u);
  for (int i = 0; i < 4; ++i) {
    for (int o = 0; o < 3; ++o) {
      double ref = b[o];
      for (int k = 0; k < 5; ++k) ref += xv[i * 5 + k] * w[o * 5 + k];
      EXPECT_NEAR(y[i * 3 + o], ref, 1e-5 * (1 + std::abs(ref))) << i << o;
    }
  }
  // Leading dims are batch dims.
  const Tensor y3 = fc(x.reshape({2, 2, 5}));
  EXPECT_THAT(y3.shape(), ElementsAre(2, 2, 3));
  EXPECT_EQ(AsDoubles(y3), y);
}

TEST(NnLayersTest, LinearWithoutBiasAndBadInput) {
  Linear fc(3, 2, /*bias=*/false);
  EXPECT_FALSE(fc->bias.defined());
  EXPECT_EQ(fc.parameters().size(), 1u);
  try {
    fc(ones({2, 4}));
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[2, 4]"));
  }
}

TEST(NnLayersTest, LinearInitIsBoundedAndReproducible) {
  manual_seed(42);
  Linear a(100, 50);
  manual_seed(42);
  Linear b(100, 50);
  const double bound = 1.0 / std::sqrt(100.0);
  double max_abs = 0;
  for (double w : AsDoubles(a->weight)) {
    EXPECT_LT(std::abs(w), bound);
    max_abs = std::max(max_abs, std::abs(w));
  }
  EXPECT_GT(max_abs, 0.9 * bound);  // spans the range, not a narrower one
  for (double v : AsDoubles(a->bias)) EXPECT_LE(std::abs(v), bound);
  EXPECT_EQ(AsDoubles(a->weight), AsDoubles(b->weight));
  EXPECT_EQ(AsDoubles(a->bias), AsDoubles(b->bias));
}

TEST(NnLayersTest, DropoutIsIdentityInEval) {
  Dropout drop(0.5);
  const Tensor x = randn({64});
  drop.eval();
  EXPECT_EQ(AsDoubles(drop(x)), AsDoubles(x));
  drop.train();
  const std::vector<double> xv = AsDoubles(x);
  const std::vector<double> y = AsDoubles(drop(x));
  int zeros = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0) {
      ++zeros;
    } else {
      EXPECT_FLOAT_EQ(y[i], 2 * xv[i]);
    }
  }
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, 64);
  EXPECT_THROW(Dropout(1.5), Error);
}

TEST(NnLayersTest, ActivationsMatchFunctional) {
  const Tensor x = randn({8});
  EXPECT_EQ(AsDoubles(ReLU()(x)), AsDoubles(functional::relu(x)));
  EXPECT_EQ(AsDoubles(GELU("tanh")(x)), AsDoubles(functional::gelu(x, "tanh")));
  EXPECT_EQ(AsDoubles(GELU()(x)), AsDoubles(gelu(x, "none")));
  EXPECT_THROW(GELU("fast"), Error);
}

TEST(NnLayersTest, LayerNormParametersAndForward) {
  LayerNorm ln(4);
  EXPECT_THAT(Names(ln.named_parameters()), ElementsAre("weight", "bias"));
  EXPECT_EQ(AsDoubles(ln->weight), std::vector<double>(4, 1.0));
  const std::vector<double> y =
      AsDoubles(ln(from_vector(std::vector<float>{1, 2, 3, 4}, {1, 4})));
  // mean 2.5, biased variance 1.25.
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(y[i], (i + 1 - 2.5) / std::sqrt(1.25 + 1e-5), 1e-5);
  }
  EXPECT_TRUE(
      LayerNorm(std::vector<int64_t>{2, 4}, 1e-5, false).parameters().empty());
}

TEST(NnLayersTest, EmbeddingLooksUpRows) {
  Embedding emb(10, 3);
  EXPECT_THAT(emb->weight.shape(), ElementsAre(10, 3));
  const std::vector<double> w = AsDoubles(emb->weight);
  const std::vector<double> y =
      AsDoubles(emb(from_vector(std::vector<int64_t>{7, 2}, {2})));
  EXPECT_EQ(y, std::vector<double>({w[21], w[22], w[23], w[6], w[7], w[8]}));
}

TEST(NnLayersTest, SequentialContainerAndBackward) {
  Sequential model(Linear(6, 5), GELU(), Flatten(), Linear(5, 2));
  model.push_back(Dropout(0.0));
  EXPECT_EQ(model.size(), 5u);
  EXPECT_THROW(model[5], Error);
  EXPECT_THROW(model.at<LinearImpl>(1), Error);

  const Tensor loss = functional::mse_loss(model(randn({3, 6})), zeros({3, 2}));
  loss.backward();
  for (const auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().shape(), p.shape()) << name;
  }
}

}  // namespace
}  // namespace stepjit::nn
