// Replay's host cost per launched kernel.
//
//   stepjit_benchmarks --benchmark_filter=Replay --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)
//
// Replay/launch: a compiled step of 64 elementwise ops on a 4-element
// tensor, compiled with a pipeline without `fuse` so that every op (and
// every constant) is a launch of its own, and verification off: the kernels
// take next to nothing, so the time per launch (us_per_launch) is what the
// replay loop spends to launch one kernel (resolve, allocate, run, free).
// Replay/<workload>: a workload's compiled step with verification off and
// its time per launched kernel (us_per_kernel; kernels included).
#include <benchmark/benchmark.h>

#include <chrono>

#include "bench/workloads.h"
#include "frontend/stepjit.h"

namespace stepjit::bench {
namespace {

// Runs `step` once per benchmark iteration; then reports the kernels a step
// launches (`kernels()`) as counter `count` and the wall time per launched
// kernel as counter `per_kernel`.
template <typename Step, typename Kernels>
void TimeSteps(benchmark::State& state, Step step, Kernels kernels,
               const char* count, const char* per_kernel) {
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    Tensor out = step();
    benchmark::DoNotOptimize(out.data_ptr());
  }
  const double us = std::chrono::duration<double, std::micro>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  const double n = static_cast<double>(kernels());
  state.counters[count] = n;
  state.counters[per_kernel] =
      us / (n * static_cast<double>(state.iterations()));
}

void BM_ReplayLaunch(benchmark::State& state) {
  CompileOptions options{.mode = Mode::kCompiled};
  options.verify = Verify::kOffUnsafe;
  options.pipeline = "canonicalize,cse,dce,memory-plan";
  auto step = compile(
      [](const Tensor& x) {
        Tensor y = x;
        for (int i = 0; i < 32; ++i) y = y * (1.0 + i * 1e-3) + 0.5;
        return y;
      },
      options);
  const Tensor x = randn({4});
  for (int i = 0; i < 5; ++i) step(x);
  if (step.stats().replays == 0) {
    state.SkipWithError("the step did not replay");
    return;
  }
  TimeSteps(
      state, [&] { return step(x); },
      [&] { return step.stats().kernels_per_step; }, "launches",
      "us_per_launch");
}
BENCHMARK(BM_ReplayLaunch)->Name("Replay/launch")->UseRealTime();

void BM_ReplayWorkload(benchmark::State& state, const Workload* w) {
  CompileOptions options{.mode = Mode::kCompiled};
  options.verify = Verify::kOffUnsafe;
  WorkloadRun run(*w, options);
  for (int64_t i = 0; i < run.StepsToWarm(); ++i) run.Step();
  TimeSteps(
      state, [&] { return run.Step(); },
      [&] { return run.stats().kernels_per_step; }, "kernels", "us_per_kernel");
}

const bool registered = [] {
  for (const Workload& w : Workloads()) {
    if (w.name != "tiny_mlp_adamw_b32" && w.name != "gpt_d64_l1_t32_b16")
      continue;
    benchmark::RegisterBenchmark(("Replay/" + w.name).c_str(),
                                 BM_ReplayWorkload, &w)
        ->UseRealTime();
  }
  return true;
}();

}  // namespace
}  // namespace stepjit::bench
