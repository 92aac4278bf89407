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
#include "program/executor.h"
#include "runtime/ops.h"
#include "tests/util/region_check_program.h"

namespace stepjit::bench {
namespace {

void BM_RegionCheck(benchmark::State& state, bool checked) {
  auto graph = ir::ParseGraph(test::RegionCheckProgram(256, 1024, 512, 784));
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
