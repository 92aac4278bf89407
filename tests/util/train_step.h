// The training steps the compile tests write most: an optimizer step around
// a loss, and the plain cross-entropy step of a model; and random batches
// to train on.
#ifndef STEPJIT_TESTS_UTIL_TRAIN_STEP_H_
#define STEPJIT_TESTS_UTIL_TRAIN_STEP_H_

#include <cstdint>
#include <vector>

#include "runtime/generator.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace stepjit::test {

// A step of two tensors: zero the gradients of `opt` (held by reference),
// loss(a, b), backward, the optimizer's step; returns the loss.
template <typename Opt, typename Loss>
auto OptimizerStep(Opt& opt, Loss loss) {
  return [&opt, loss](const Tensor& a, const Tensor& b) {
    opt.zero_grad();
    Tensor value = loss(a, b);
    value.backward();
    opt.step();
    return value;
  };
}

// The step of the cross-entropy of model(x) against y (`model` held by
// reference).
template <typename Model, typename Opt>
auto CrossEntropyStep(Model& model, Opt& opt) {
  return OptimizerStep(opt, [&model](const Tensor& x, const Tensor& y) {
    return cross_entropy(model(x), y);
  });
}

// Inputs and their class targets.
struct Batch {
  Tensor x, y;
};

// `n` batches of `rows` standard normal inputs of `features` each and i64
// targets in [0, classes), drawn from Generator(seed): x, then y, batch after
// batch.
inline std::vector<Batch> RandomBatches(int n, uint64_t seed, int64_t rows,
                                        int64_t features, int64_t classes) {
  Generator gen(seed);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) {
    Tensor x = randn({rows, features}, {}, &gen);
    Tensor y = randint(0, classes, {rows}, {.dtype = DType::kI64}, &gen);
    out.push_back({std::move(x), std::move(y)});
  }
  return out;
}

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_TRAIN_STEP_H_
