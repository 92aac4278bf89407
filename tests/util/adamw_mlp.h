// A small MLP trained with AdamW, the model of many compiled-step tests.
#ifndef STEPJIT_TESTS_UTIL_ADAMW_MLP_H_
#define STEPJIT_TESTS_UTIL_ADAMW_MLP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/device.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "training/nn/layers.h"
#include "training/optim/adamw.h"

namespace stepjit::test {

// Linear layers of the given widths with a ReLU between each two, made after
// manual_seed(seed) and moved to `device`, and AdamW (lr 1e-2) over them.
struct AdamWMlp {
  nn::Sequential model;
  std::vector<nn::Linear> linears;
  std::unique_ptr<optim::AdamW> opt;

  AdamWMlp(const std::vector<int64_t>& widths, uint64_t seed,
           Device device = Device::cpu()) {
    manual_seed(seed);
    for (size_t i = 0; i + 1 < widths.size(); ++i) {
      if (i > 0) model.push_back(nn::ReLU());
      linears.push_back(nn::Linear(widths[i], widths[i + 1]));
      model.push_back(linears.back());
    }
    if (!device.is_cpu()) model->to(device);
    opt = std::make_unique<optim::AdamW>(model.parameters(),
                                         optim::AdamWOptions{.lr = 1e-2});
  }
  Tensor Step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    opt->step();
    return loss;
  }
};

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_ADAMW_MLP_H_
