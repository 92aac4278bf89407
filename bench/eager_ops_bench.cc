// Eager elementwise kernels on the CPU, one op per benchmark, over
// f32[1024, 1024]: what a step pays for each op outside a compiled region
// (eager steps, and every call that falls back to eager).
//
//   stepjit_benchmarks --benchmark_filter=Eager --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)
//
// bytes_per_second counts each operand read once and the result written
// once (4 bytes per f32 element, 1 per bool), against this machine's triad
// bandwidth (Peak/triad_f32); GB/s far below it, for an op whose math is
// cheap, means the kernel, not memory, is the limit.
#include <benchmark/benchmark.h>

#include <functional>
#include <string>
#include <vector>

#include "frontend/stepjit.h"

namespace stepjit::bench {
namespace {

constexpr int64_t kRows = 1024, kCols = 1024;

struct EagerCase {
  const char* name;
  int operands;  // f32 operands read
  std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> op;
};

const std::vector<EagerCase>& Cases() {
  static const auto* cases = new std::vector<EagerCase>{
      {"add", 2,
       [](const Tensor& a, const Tensor& b, const Tensor&) { return a + b; }},
      {"mul", 2,
       [](const Tensor& a, const Tensor& b, const Tensor&) { return a * b; }},
      {"neg", 1,
       [](const Tensor& a, const Tensor&, const Tensor&) { return -a; }},
      {"relu", 1,
       [](const Tensor& a, const Tensor&, const Tensor&) { return relu(a); }},
      {"abs", 1,
       [](const Tensor& a, const Tensor&, const Tensor&) { return abs(a); }},
      {"exp", 1,
       [](const Tensor& a, const Tensor&, const Tensor&) { return exp(a); }},
      {"tanh", 1,
       [](const Tensor& a, const Tensor&, const Tensor&) { return tanh(a); }},
      {"sigmoid", 1,
       [](const Tensor& a, const Tensor&, const Tensor&) {
         return sigmoid(a);
       }},
      {"silu", 1,
       [](const Tensor& a, const Tensor&, const Tensor&) { return silu(a); }},
      {"gelu", 1,
       [](const Tensor& a, const Tensor&, const Tensor&) { return gelu(a); }},
      {"where", 2,
       [](const Tensor& a, const Tensor& b, const Tensor& c) {
         return where(c, a, b);
       }},
  };
  return *cases;
}

void BM_Eager(benchmark::State& state, const EagerCase* c) {
  Generator gen(1);
  const Tensor a = randn({kRows, kCols}, {}, &gen);
  const Tensor b = randn({kRows, kCols}, {}, &gen);
  const Tensor cond = gt(a, b);
  for (auto _ : state) {
    Tensor y = c->op(a, b, cond);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  const int64_t n = kRows * kCols;
  const int64_t bool_bytes = std::string(c->name) == "where" ? n : 0;
  state.SetBytesProcessed(state.iterations() *
                          (n * 4 * (c->operands + 1) + bool_bytes));
}

const bool registered = [] {
  for (const EagerCase& c : Cases()) {
    benchmark::RegisterBenchmark(
        ("Eager/" + std::string(c.name) + "/f32_1024x1024").c_str(), BM_Eager,
        &c)
        ->UseRealTime();
  }
  return true;
}();

}  // namespace
}  // namespace stepjit::bench
