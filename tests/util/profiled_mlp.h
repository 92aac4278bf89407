// The small AdamW MLP step the profiler tests profile, on the CPU and on the
// CUDA device, with its GEMM FLOPs counted by hand.
#ifndef STEPJIT_TESTS_UTIL_PROFILED_MLP_H_
#define STEPJIT_TESTS_UTIL_PROFILED_MLP_H_

#include "runtime/device.h"
#include "tests/util/adamw_mlp.h"

namespace stepjit::test {

// x[16, 20] -> Linear(20, 32) -> ReLU -> Linear(32, 6), AdamW, on `device`.
struct ProfiledMlp : AdamWMlp {
  explicit ProfiledMlp(Device device = Device::cpu())
      : AdamWMlp({20, 32, 6}, 3, device) {}
};

// The GEMMs of one step, by hand (2 FLOPs per multiply-add): forward
// 16x20 . 20x32 and 16x32 . 32x6; backward dW2 = 6x16 . 16x32, dH =
// 16x6 . 6x32, dW1 = 32x16 . 16x20 (x needs no gradient).
constexpr double kProfiledMlpStepGemmFlops =
    2.0 *
    (16 * 20 * 32 + 16 * 32 * 6 + 6 * 16 * 32 + 16 * 6 * 32 + 32 * 16 * 20);

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_UTIL_PROFILED_MLP_H_
