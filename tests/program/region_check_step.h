// The program the accuracy checker's tests run
// (tests/program/region_check_test.cc on the CPU,
// tests/cuda/region_check_cuda_test.cc on CUDA), and its inputs; building
// programs and comparing their results bit for bit.
#ifndef STEPJIT_TESTS_RUNTIME_REGION_CHECK_STEP_H_
#define STEPJIT_TESTS_RUNTIME_REGION_CHECK_STEP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "ir/status.h"
#include "ir/verifier.h"
#include "program/executor.h"
#include "program/region_check.h"
#include "runtime/ops.h"
#include "tests/util/region_check_program.h"

namespace stepjit::test {

// The program at test sizes: x [32, 48], the AdamW weight [40, 33].
inline const std::string kStep = RegionCheckProgram(32, 48, 40, 33);

inline std::unique_ptr<ir::Graph> ParseVerified(absl::string_view text) {
  absl::StatusOr<std::unique_ptr<ir::Graph>> g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  const absl::Status verified = ir::Verify(**g);
  EXPECT_TRUE(verified.ok()) << verified;
  return *std::move(g);
}

// One starting point of kStep: inputs, and state that each run gets its own
// copy of (runs write it).
struct Start {
  std::vector<Tensor> inputs, state;
  explicit Start(uint64_t seed, Device device = Device::cpu()) {
    Generator g(seed);
    inputs = {randn({32, 48}, {}, &g), randn({40, 33}, {}, &g)};
    state = {randn({48}, {}, &g), scalar_tensor(3.0),
             scalar_tensor(0.999, {.dtype = DType::kF64}),
             randn({40, 33}, {}, &g), rand({40, 33}, {}, &g)};
    for (Tensor& t : inputs) t = t.to(device);
    for (Tensor& t : state) t = t.to(device);
  }
  std::vector<Tensor> StateCopy() const {
    std::vector<Tensor> out;
    for (const Tensor& t : state) out.push_back(t.clone());
    return out;
  }
};

// `g` as a program, its regions generated kernels when `codegen` (else
// interpreted).
inline runtime::Program BuildProgram(const ir::Graph& g, bool codegen = true) {
  runtime::ProgramOptions options;
  options.codegen = codegen;
  absl::StatusOr<runtime::Program> p = runtime::Program::Build(g, options);
  SJ_CHECK(p.ok(), p.status().message());
  return *std::move(p);
}

// Bit for bit (NaN equal to NaN).
inline void ExpectSame(const std::vector<Tensor>& got,
                       const std::vector<Tensor>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const runtime::TensorDiff d =
        runtime::CompareTensors(got[i], want[i], {0, 0});
    EXPECT_TRUE(d.ok()) << what << " " << i << ": "
                        << runtime::ToString(d, want[i].shape());
  }
}

}  // namespace stepjit::test

#endif  // STEPJIT_TESTS_RUNTIME_REGION_CHECK_STEP_H_
