// Trains a tiny MLP on a fixed synthetic task, eagerly and as a compiled
// step, against an installed stepjit. Exits 0 only when both learn (the loss
// falls below a quarter of where it started) and agree.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "frontend/stepjit.h"
#include "runtime/ops.h"
#include "training/nn/layers.h"
#include "training/optim/adamw.h"

using namespace stepjit;

namespace {

// Class = which half of the plane the point lies in (x0 + x1 > 0).
void MakeData(Tensor* x, Tensor* y) {
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int i = 0; i < 64; ++i) {
    const float a = std::sin(0.37f * i) * 2.0f, b = std::cos(0.91f * i) * 2.0f;
    xs.push_back(a);
    xs.push_back(b);
    ys.push_back(a + b > 0 ? 1 : 0);
  }
  *x = from_vector(xs, {64, 2});
  *y = from_vector(ys, {64});
}

// The loss after each of `steps` steps; `replays` gets the compiled step's
// replay count.
std::vector<double> Train(bool compiled, int steps, int64_t* replays) {
  manual_seed(7);
  nn::Sequential model(nn::Linear(2, 16), nn::ReLU(), nn::Linear(16, 2));
  optim::AdamW opt(model.parameters(), {.lr = 0.05});
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  Tensor x, y;
  MakeData(&x, &y);
  std::vector<double> losses;
  if (compiled) {
    auto fast = stepjit::compile(step);
    for (int i = 0; i < steps; ++i) losses.push_back(fast(x, y).item());
    *replays = fast.stats().replays;
    std::printf("compiled: %lld replays, %d kernels per step\n",
                static_cast<long long>(fast.stats().replays),
                fast.stats().kernels_per_step);
  } else {
    for (int i = 0; i < steps; ++i) losses.push_back(step(x, y).item());
  }
  return losses;
}

}  // namespace

int main() {
  const int steps = 60;
  int64_t replays = 0;
  const std::vector<double> eager = Train(false, steps, &replays);
  const std::vector<double> compiled = Train(true, steps, &replays);
  int bad = 0;
  for (int i = 0; i < steps; ++i) {
    if (std::abs(eager[i] - compiled[i]) > 1e-4 * (1 + std::abs(eager[i]))) {
      std::printf("step %d: eager loss %.6f, compiled %.6f\n", i, eager[i],
                  compiled[i]);
      ++bad;
    }
  }
  std::printf("loss: first %.4f, last eager %.4f, last compiled %.4f\n",
              eager[0], eager.back(), compiled.back());
  if (!(eager.back() < 0.25 * eager[0])) {
    std::printf("FAIL: the loss did not fall below a quarter of its start\n");
    return 1;
  }
  if (replays < steps / 2) {
    std::printf("FAIL: the compiled step replayed %lld of %d steps\n",
                static_cast<long long>(replays), steps);
    return 1;
  }
  if (bad > 0) {
    std::printf("FAIL: %d steps differ between eager and compiled\n", bad);
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
