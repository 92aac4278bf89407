// The small training task the mixed-precision tests share (eager in
// runtime_tests, compiled in frontend_tests): 4 overlapping Gaussian classes
// in 20 dimensions, and the MLP that learns it.
#ifndef STEPJIT_TESTS_AMP_TASK_H_
#define STEPJIT_TESTS_AMP_TASK_H_

#include <cstdint>

#include "frontend/stepjit.h"

namespace stepjit::testing_task {

struct ClassificationTask {
  static constexpr int64_t kDim = 20, kClasses = 4, kTrain = 512, kVal = 256;
  Tensor x_train, y_train, x_val, y_val;
};

// Class centers 0.5 * N(0, 1) apart from unit noise: an f32 MLP reaches
// about 0.77 validation accuracy (chance is 0.25).
inline ClassificationTask OverlappingClasses() {
  using T = ClassificationTask;
  Generator data(77);
  Tensor centers = randn({T::kClasses, T::kDim}, {}, &data) * 0.5;
  auto make = [&](int64_t count) {
    Tensor y = randint(0, T::kClasses, {count}, {.dtype = DType::kI64}, &data);
    Tensor x = randn({count, T::kDim}, {}, &data) + matmul(one_hot(y, T::kClasses), centers);
    return std::pair{x, y};
  };
  ClassificationTask t;
  std::tie(t.x_train, t.y_train) = make(T::kTrain);
  std::tie(t.x_val, t.y_val) = make(T::kVal);
  return t;
}

// 20-64-4 ReLU MLP with a fixed initialization.
inline nn::Sequential TaskMlp() {
  manual_seed(5);
  nn::Sequential model;
  model.push_back(nn::Linear(ClassificationTask::kDim, 64));
  model.push_back(nn::ReLU());
  model.push_back(nn::Linear(64, ClassificationTask::kClasses));
  return model;
}

}  // namespace stepjit::testing_task

#endif  // STEPJIT_TESTS_AMP_TASK_H_
