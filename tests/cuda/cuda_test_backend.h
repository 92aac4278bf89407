// The backend the CUDA tests run on: the host emulator by default (so they run
// on machines without a GPU), or the real driver with
// STEPJIT_TEST_CUDA_BACKEND=driver (they skip when there is no device).
#ifndef STEPJIT_TESTS_CUDA_CUDA_TEST_BACKEND_H_
#define STEPJIT_TESTS_CUDA_CUDA_TEST_BACKEND_H_

#include <cstdlib>
#include <string>
#include <vector>

#include "devices/cuda/backend.h"
#include "gtest/gtest.h"
#include "runtime/tensor.h"
#include "testing/cuda_emulator/emulator_backend.h"

namespace stepjit::test {

// Installs the chosen backend once per process; empty when ready, else why
// the tests must skip.
inline std::string EnsureCudaTestBackend() {
  static const std::string why = [] {
    const char* env = std::getenv("STEPJIT_TEST_CUDA_BACKEND");
    const std::string choice = env != nullptr ? env : "emulator";
    if (choice == "driver") {
      absl::StatusOr<runtime::cuda::Backend*> b = runtime::cuda::RequireBackend();
      return b.ok() ? std::string() : std::string(b.status().message());
    }
    runtime::cuda::SetBackend(runtime::cuda::MakeEmulatorBackend());
    return std::string();
  }();
  return why;
}

inline bool OnRealGpu() {
  const char* env = std::getenv("STEPJIT_TEST_CUDA_BACKEND");
  return env != nullptr && std::string(env) == "driver";
}

// A tensor's values on the host as f64, from any device and layout.
inline std::vector<double> Values(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::kF64).contiguous().to_vector<double>();
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = EnsureCudaTestBackend();
    if (!why.empty()) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_CUDA_CUDA_TEST_BACKEND_H_
