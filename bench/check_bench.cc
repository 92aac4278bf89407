// The per-call recording check (CompileOptions::verify, every call by
// default), timed apart from the replay it guards, with the caches as the
// replay leaves them and with the caches evicted on purpose.
//
//   stepjit_benchmarks --benchmark_filter=Check --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)
//
// Check/<workload>/warm: the workload's compiled step, each iteration one
// call (check and replay); the manual time is the check alone
// (CompileStats::verify_ms), so the benchmark time is per check, with the
// caches as the step's own replay left them.
// Check/<workload>/evicted: the same after writing 64 MiB (more than the
// last-level cache) before each call: every tensor header, module and
// optimizer state the check reads comes from memory. The gap between the
// two is what the check's distinct cache lines cost, the lever for its
// overhead on steps whose working set outgrows the cache.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "bench/workloads.h"
#include "frontend/stepjit.h"

namespace stepjit::bench {
namespace {

void BM_Check(benchmark::State& state, const Workload* w, bool evict) {
  WorkloadRun run(*w, CompileOptions{.mode = Mode::kCompiled});
  for (int64_t i = 0; i < run.StepsToWarm(); ++i) run.Step();
  if (run.stats().replays == 0) {
    state.SkipWithError("the step did not replay");
    return;
  }
  std::vector<uint64_t> pollution(evict ? (64 << 20) / sizeof(uint64_t) : 0);
  uint64_t sum = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < pollution.size(); i += 8) sum += ++pollution[i];
    const CompileStats before = run.stats();
    Tensor out = run.Step();
    const CompileStats after = run.stats();
    benchmark::DoNotOptimize(out.data_ptr());
    if (after.verifications != before.verifications + 1) {
      state.SkipWithError("a call did not run exactly one recording check");
      return;
    }
    state.SetIterationTime((after.verify_ms - before.verify_ms) * 1e-3);
  }
  benchmark::DoNotOptimize(sum);
  state.counters["ops_per_check"] =
      static_cast<double>(run.stats().verify_ops) /
      static_cast<double>(run.stats().verifications);
}

const bool registered = [] {
  for (const Workload& w : Workloads()) {
    if (w.name != "tiny_mlp_adamw_b32" && w.name != "gpt_d64_l1_t32_b16" &&
        w.name != "gpt_d128_l2_t64_b16")
      continue;
    for (bool evict : {false, true}) {
      benchmark::RegisterBenchmark(
          ("Check/" + w.name + (evict ? "/evicted" : "/warm")).c_str(),
          BM_Check, &w, evict)
          ->UseManualTime()
          ->Iterations(400)  // a GPT call is milliseconds; the check is us
          ->Unit(benchmark::kMicrosecond);
    }
  }
  return true;
}();

}  // namespace
}  // namespace stepjit::bench
