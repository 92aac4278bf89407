// The accuracy checker's cost: Program::RunChecked against Run on a program
// of three generated regions (an elementwise chain with a column sum, a
// region reading that sum, an AdamW-like update of a 512x784 weight's
// moments in their state buffers).
//
//   stepjit_benchmarks --benchmark_filter=RegionCheck
#include <benchmark/benchmark.h>

#include <vector>

#include "ir/parser.h"
#include "ir/status.h"
#include "runtime/executor.h"
#include "runtime/ops.h"

namespace stepjit::bench {
namespace {

constexpr char kStep[] =
    R"(graph @step(%x: f32[256,1024] input, %b: f32[1024] state, %t: f32[] state, %beta: f64[] state, %g: f32[512,784] input, %m: f32[512,784] state, %v: f32[512,784] state) {
  %0 = fusion @chain(%x, %b) : (f32[256,1024], f32[1024]) {
    graph @chain(%p0: f32[256,1024] input, %p1: f32[1024] input) {
      %0 = mul %p0, %p0 : f32[256,1024]
      %1 = add %0, %p1 : f32[256,1024]
      %2 = tanh %1 : f32[256,1024]
      %3 = sum %2 {dims = [0], keepdim = false} : f32[1024]
      return %2, %3
    }
  }
  %1 = fusion @post(%0#1, %b) : (f32[1024]) {
    graph @post(%p0: f32[1024] input, %p1: f32[1024] input) {
      %0 = mul %p0, %p1 : f32[1024]
      %1 = sub %0, %p1 : f32[1024]
      return %1
    }
  }
  %2 = fusion @adamw(%t, %beta, %g, %m, %v) : (f32[], f32[512,784], f32[512,784]) {
    graph @adamw(%p0: f32[] input, %p1: f64[] input, %p2: f32[512,784] input, %p3: f32[512,784] input, %p4: f32[512,784] input) {
      %0 = full {shape = [], value = 1.0, dtype = f32} : f32[]
      %1 = add_ %p0, %0 {alpha = 1.0, in_place = true} : f32[]
      %2 = pow %p1, %1 : f64[]
      %3 = full {shape = [], value = 1.0, dtype = f64} : f64[]
      %4 = sub %3, %2 : f64[]
      %5 = full {shape = [], value = 0.1, dtype = f32} : f32[]
      %6 = lerp_ %p3, %p2, %5 {in_place = true} : f32[512,784]
      %7 = div %6, %4 : f32[512,784]
      %8 = addcmul_ %p4, %7, %7 {value = -0.001, in_place = true} : f32[512,784]
      return %1, %6, %8
    }
  }
  assign %t, %2#0
  assign %m, %2#1
  assign %v, %2#2
  return %0#0, %1#0
})";

void BM_RegionCheck(benchmark::State& state, bool checked) {
  auto graph = ir::ParseGraph(kStep);
  SJ_CHECK(graph.ok(), graph.status().message());
  absl::StatusOr<runtime::Program> p = runtime::Program::Build(**graph);
  SJ_CHECK(p.ok(), p.status().message());
  Generator gen(1);
  const std::vector<Tensor> inputs = {randn({256, 1024}, {}, &gen),
                                      randn({512, 784}, {}, &gen)};
  const std::vector<Tensor> st = {randn({1024}, {}, &gen), scalar_tensor(1.0),
                                  scalar_tensor(0.999, {.dtype = DType::kF64}),
                                  randn({512, 784}, {}, &gen),
                                  rand({512, 784}, {}, &gen)};
  std::vector<runtime::RegionMismatch> mismatches;
  for (auto _ : state) {
    std::vector<Tensor> out =
        checked ? p->RunChecked(inputs, st, &mismatches) : p->Run(inputs, st);
    benchmark::DoNotOptimize(out[0].data_ptr());
  }
  SJ_CHECK(mismatches.empty(),
           "the program's regions disagree with their interpretation");
}
BENCHMARK_CAPTURE(BM_RegionCheck, run, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RegionCheck, run_checked, true)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace stepjit::bench
