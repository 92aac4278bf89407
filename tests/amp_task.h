// The small training task the mixed-precision tests share (eager in
// training_tests, compiled in frontend_tests): 4 overlapping Gaussian classes
// in 20 dimensions, the MLP that learns it, and the check that training it
// in bf16 tracks f32.
#ifndef STEPJIT_TESTS_AMP_TASK_H_
#define STEPJIT_TESTS_AMP_TASK_H_

#include <cstdint>
#include <cstdio>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"

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

// A run on the task: the mean training loss over its last 50 steps and the
// validation accuracy.
struct TaskRun {
  double tail_loss, accuracy;
};

// Trains `model` for 200 steps of 64 training examples, `step(x, y)`
// returning each step's loss, then evaluates it on the validation examples
// (under bf16 autocast when `bf16`).
template <typename Step>
TaskRun TrainAndEvaluate(const ClassificationTask& task, nn::Sequential& model,
                         Step&& step, bool bf16) {
  double tail = 0;
  for (int i = 0; i < 200; ++i) {
    const int64_t b = (i * 64) % ClassificationTask::kTrain;
    const double loss = step(task.x_train.slice(0, b, b + 64),
                             task.y_train.slice(0, b, b + 64));
    if (i >= 150) tail += loss / 50;
  }
  NoGradGuard no_grad;
  amp::Autocast guard(DType::kBF16, bf16);
  const Tensor pred = argmax(model(task.x_val), 1);
  return {tail, mean(eq(pred, task.y_val).to(DType::kF32)).item()};
}

// `train(bf16)` in f32 and in bf16 end close: tail losses within 0.05 and
// validation accuracies within 3 points. `label` prefixes the runs' names
// in the line printed.
template <typename Train>
void ExpectBf16TracksF32(const char* label, Train&& train) {
  const TaskRun f32 = train(false), bf16 = train(true);
  std::printf(
      "%sf32: tail loss %.4f val acc %.4f; %sbf16: tail loss %.4f val acc "
      "%.4f\n",
      label, f32.tail_loss, f32.accuracy, label, bf16.tail_loss, bf16.accuracy);
  EXPECT_GT(f32.accuracy, 0.6);  // overlapping classes: chance is 0.25
  EXPECT_NEAR(bf16.tail_loss, f32.tail_loss, 0.05);
  EXPECT_NEAR(bf16.accuracy, f32.accuracy, 0.03);
}

}  // namespace stepjit::testing_task

#endif  // STEPJIT_TESTS_AMP_TASK_H_
