// The program the accuracy checker's tests run
// (tests/runtime/region_check_test.cc on the CPU,
// tests/cuda/region_check_cuda_test.cc on CUDA), and its inputs; building
// programs and comparing their results bit for bit.
#ifndef STEPJIT_TESTS_RUNTIME_REGION_CHECK_STEP_H_
#define STEPJIT_TESTS_RUNTIME_REGION_CHECK_STEP_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "ir/status.h"
#include "ir/verifier.h"
#include "runtime/executor.h"
#include "runtime/ops.h"
#include "runtime/region_check.h"

namespace stepjit::test {

// Three regions: an elementwise chain with a column sum, a region reading
// the chain's sum (so it runs on whatever the chain computed), and an
// AdamW-like update that writes its step count and moments into their
// state buffers (in_place: memory planning donated them).
inline constexpr char kStep[] =
    R"(graph @step(%x: f32[32,48] input, %b: f32[48] state, %t: f32[] state, %beta: f64[] state, %g: f32[40,33] input, %m: f32[40,33] state, %v: f32[40,33] state) {
  %0 = fusion @chain(%x, %b) : (f32[32,48], f32[48]) {
    graph @chain(%p0: f32[32,48] input, %p1: f32[48] input) {
      %0 = mul %p0, %p0 : f32[32,48]
      %1 = add %0, %p1 : f32[32,48]
      %2 = tanh %1 : f32[32,48]
      %3 = sum %2 {dims = [0], keepdim = false} : f32[48]
      return %2, %3
    }
  }
  %1 = fusion @post(%0#1, %b) : (f32[48]) {
    graph @post(%p0: f32[48] input, %p1: f32[48] input) {
      %0 = mul %p0, %p1 : f32[48]
      %1 = sub %0, %p1 : f32[48]
      return %1
    }
  }
  %2 = fusion @adamw(%t, %beta, %g, %m, %v) : (f32[], f32[40,33], f32[40,33]) {
    graph @adamw(%p0: f32[] input, %p1: f64[] input, %p2: f32[40,33] input, %p3: f32[40,33] input, %p4: f32[40,33] input) {
      %0 = full {shape = [], value = 1.0, dtype = f32} : f32[]
      %1 = add_ %p0, %0 {alpha = 1.0, in_place = true} : f32[]
      %2 = pow %p1, %1 : f64[]
      %3 = full {shape = [], value = 1.0, dtype = f64} : f64[]
      %4 = sub %3, %2 : f64[]
      %5 = full {shape = [], value = 0.1, dtype = f32} : f32[]
      %6 = lerp_ %p3, %p2, %5 {in_place = true} : f32[40,33]
      %7 = div %6, %4 : f32[40,33]
      %8 = addcmul_ %p4, %7, %7 {value = -0.001, in_place = true} : f32[40,33]
      return %1, %6, %8
    }
  }
  assign %t, %2#0
  assign %m, %2#1
  assign %v, %2#2
  return %0#0, %1#0
})";

inline std::unique_ptr<ir::Graph> ParseVerified(const char* text) {
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
