// A small CNN (conv, ReLU, max and average pooling, a global average pool,
// flatten, linear) trained compiled beside an eager twin that starts
// identical: every call's loss and the final parameters agree exactly in
// f32 on the CPU (the compiled step runs the same convolution kernels and
// fuses what is around them), over SGD with momentum, nesterov and AdamW
// with clipping, odd batch sizes, a batch size that changes mid-run and
// eval mode; bf16 autocast agrees with eager bf16 autocast within bf16's
// rounding.
#include <functional>
#include <memory>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"

namespace stepjit {
namespace {

std::vector<float> Values(const Tensor& t) {
  return t.contiguous().to(DType::kF32).to_vector<float>();
}

enum class Opt { kMomentum, kNesterov, kAdamW };

struct Cnn {
  explicit Cnn(Opt opt) {
    manual_seed(5);
    model = nn::Sequential(
        nn::Conv2d(1, 4, 3, nn::Conv2dModuleOptions{.padding = {1, 1}}),
        nn::ReLU(), nn::MaxPool2d(2),
        nn::Conv2d(4, 8, std::array<int64_t, 2>{3, 2},
                   nn::Conv2dModuleOptions{
                       .stride = {2, 1}, .padding = {1, 1}, .groups = 2}),
        nn::ReLU(),
        nn::AvgPool2d(Pool2dOptions{.kernel_size = {2, 2},
                                    .stride = std::array<int64_t, 2>{1, 1},
                                    .count_include_pad = false}),
        nn::AdaptiveAvgPool2d(std::array<int64_t, 2>{1, 1}), nn::Flatten(),
        nn::Linear(8, 10));
    switch (opt) {
      case Opt::kMomentum:
        optimizer = std::make_unique<optim::SGD>(
            model.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
        break;
      case Opt::kNesterov:
        optimizer = std::make_unique<optim::SGD>(
            model.parameters(),
            optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
        break;
      case Opt::kAdamW:
        optimizer = std::make_unique<optim::AdamW>(
            model.parameters(), optim::AdamWOptions{.lr = 1e-2});
        clip = 0.5;
        break;
    }
  }
  nn::Sequential model{nullptr};
  std::unique_ptr<optim::Optimizer> optimizer;
  double clip = 0;

  Tensor Step(const Tensor& x, const Tensor& y) {
    optimizer->zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    if (clip > 0) nn::utils::clip_grad_norm_(model.parameters(), clip);
    optimizer->step();
    return loss;
  }
};

TEST(ConvCompileTest, ACnnTrainsExactlyLikeEager) {
  for (Opt opt : {Opt::kMomentum, Opt::kNesterov, Opt::kAdamW}) {
    SCOPED_TRACE(static_cast<int>(opt));
    Cnn a(opt), b(opt);
    auto fast = compile(
        [&a](const Tensor& x, const Tensor& y) { return a.Step(x, y); });
    Generator data(11);
    // Odd batch sizes; the size changes mid-run (a new shape).
    for (int call = 0; call < 30; ++call) {
      const int64_t n = call < 20 ? 5 : 3;
      const Tensor x = randn({n, 1, 12, 10}, {}, &data);
      const Tensor y = randint(0, 10, {n}, {.dtype = DType::kI64}, &data);
      ASSERT_EQ(Values(fast(x, y)), Values(b.Step(x, y)))
          << "call " << call << "\n"
          << fast.explain();
    }
    const auto pa = a.model.parameters(), pb = b.model.parameters();
    for (size_t i = 0; i < pa.size(); ++i)
      EXPECT_EQ(Values(pa[i]), Values(pb[i])) << "parameter " << i;
    EXPECT_GE(fast.stats().replays, 20) << fast.explain();
    // Evaluation: the compiled forward agrees too.
    a.model->eval();
    b.model->eval();
    auto eval = compile([&a](const Tensor& x) {
      NoGradGuard no_grad;
      return a.model(x);
    });
    const Tensor x = randn({4, 1, 12, 10}, {}, &data);
    for (int i = 0; i < 3; ++i) {
      NoGradGuard no_grad;
      EXPECT_EQ(Values(eval(x)), Values(b.model(x)));
    }
  }
}

// A residual block with batch norm: conv-BN-ReLU-conv-BN plus the input,
// then a pooled head. The running statistics are buffers the compiled step
// updates in place, call after call, exactly as eager; eval mode (a flag)
// replays with them.
struct ResidualNet {
  ResidualNet() {
    manual_seed(9);
    stem = nn::Conv2d(1, 4, 3, nn::Conv2dModuleOptions{.padding = {1, 1}});
    conv1 = nn::Conv2d(
        4, 4, 3, nn::Conv2dModuleOptions{.padding = {1, 1}, .bias = false});
    conv2 = nn::Conv2d(
        4, 4, 3, nn::Conv2dModuleOptions{.padding = {1, 1}, .bias = false});
    head = nn::Linear(4, 10);
    for (auto* m : {&bn0, &bn1, &bn2}) *m = nn::BatchNorm2d(4);
    std::vector<Tensor> params;
    for (nn::Module* m : std::initializer_list<nn::Module*>{
             stem.ptr().get(), conv1.ptr().get(), conv2.ptr().get(),
             head.ptr().get(), bn0.ptr().get(), bn1.ptr().get(),
             bn2.ptr().get()})
      for (const Tensor& p : m->parameters()) params.push_back(p);
    optimizer = std::make_unique<optim::SGD>(
        params, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  }
  nn::Conv2d stem{nullptr}, conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn0{nullptr}, bn1{nullptr}, bn2{nullptr};
  nn::Linear head{nullptr};
  std::unique_ptr<optim::Optimizer> optimizer;

  void Train(bool on) {
    for (nn::Module* m : std::initializer_list<nn::Module*>{
             bn0.ptr().get(), bn1.ptr().get(), bn2.ptr().get()})
      m->train(on);
  }
  Tensor Forward(const Tensor& x) {
    const Tensor h = relu(bn0(stem(x)));
    const Tensor r = bn2(conv2(relu(bn1(conv1(h)))));
    const Tensor pooled = adaptive_avg_pool2d(relu(r + h), {1, 1});
    return head(pooled.reshape({x.size(0), 4}));
  }
  Tensor Step(const Tensor& x, const Tensor& y) {
    optimizer->zero_grad();
    Tensor loss = cross_entropy(Forward(x), y);
    loss.backward();
    optimizer->step();
    return loss;
  }
  std::vector<Tensor> Buffers() const {
    std::vector<Tensor> out;
    for (const nn::BatchNorm2d* m : {&bn0, &bn1, &bn2})
      for (const Tensor& b : (*m)->buffers()) out.push_back(b);
    return out;
  }
};

TEST(ConvCompileTest, BatchNormBuffersTrainAndEvaluateExactlyLikeEager) {
  ResidualNet a, b;
  auto fast =
      compile([&a](const Tensor& x, const Tensor& y) { return a.Step(x, y); });
  Generator data(13);
  for (int call = 0; call < 20; ++call) {
    const Tensor x = randn({5, 1, 8, 8}, {}, &data);
    const Tensor y = randint(0, 10, {5}, {.dtype = DType::kI64}, &data);
    ASSERT_EQ(Values(fast(x, y)), Values(b.Step(x, y)))
        << "call " << call << "\n"
        << fast.explain();
  }
  EXPECT_GE(fast.stats().replays, 15) << fast.explain();
  const std::vector<Tensor> ba = a.Buffers(), bb = b.Buffers();
  ASSERT_EQ(ba.size(), 9u);
  for (size_t i = 0; i < ba.size(); ++i)
    EXPECT_EQ(Values(ba[i]), Values(bb[i])) << "buffer " << i;
  EXPECT_EQ(Values(a.bn0->num_batches_tracked)[0], 20.0f);
  // Evaluation: the same compiled function reads the flag and the running
  // statistics; nothing is updated.
  a.Train(false);
  b.Train(false);
  auto eval = compile([&a](const Tensor& x) {
    NoGradGuard no_grad;
    return a.Forward(x);
  });
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({3, 1, 8, 8}, {}, &data);
    NoGradGuard no_grad;
    EXPECT_EQ(Values(eval(x)), Values(b.Forward(x))) << i;
  }
  EXPECT_EQ(Values(a.bn0->num_batches_tracked)[0], 20.0f);
}

TEST(ConvCompileTest, Bf16AutocastAgreesWithEagerAutocast) {
  Cnn a(Opt::kMomentum), b(Opt::kMomentum);
  auto fast =
      compile([&a](const Tensor& x, const Tensor& y) { return a.Step(x, y); },
              {.amp = DType::kBF16});
  Generator data(12);
  for (int call = 0; call < 15; ++call) {
    const Tensor x = randn({6, 1, 12, 10}, {}, &data);
    const Tensor y = randint(0, 10, {6}, {.dtype = DType::kI64}, &data);
    const float got = Values(fast(x, y))[0];
    Tensor want;
    {
      amp::Autocast autocast(DType::kBF16);
      b.optimizer->zero_grad();
      want = cross_entropy(b.model(x), y);
    }
    want.backward();
    b.optimizer->step();
    // Both round the convolutions' operands to bf16; the f32 losses differ
    // by the order of a few roundings.
    EXPECT_NEAR(got, Values(want)[0], 2e-2 * std::fabs(Values(want)[0]))
        << "call " << call;
  }
  EXPECT_GE(fast.stats().replays, 10) << fast.explain();
}

}  // namespace
}  // namespace stepjit
