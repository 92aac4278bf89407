// The README's example: one epoch of Fashion-MNIST through a compiled step.
#include <cstdio>

#include "frontend/stepjit.h"
#include "runtime/ops.h"
#include "training/data/dataloader.h"
#include "training/data/idx.h"
#include "training/nn/layers.h"
#include "training/optim/adamw.h"
using namespace stepjit;

int main() {
  data::Dataset train =
      data::LoadFashionMnist(data::kFashionMnistDir, true).value();
  data::DataLoader loader(train, {.batch_size = 128, .shuffle = true});
  nn::Sequential model(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 10));
  optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto fast = stepjit::compile(step);  // eager, then traced, then replayed
  int n = 0;
  for (data::Batch& b : loader) {
    Tensor loss = fast(b.x, b.y);
    if (++n % 100 == 0) std::printf("step %d  loss %.4f\n", n, loss.item());
  }
  std::printf("%s", fast.explain().c_str());
}
