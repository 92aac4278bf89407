// Training-step benchmarks: each workload of bench/workloads.h, eager and
// compiled, plus one fused elementwise region against its eager op chain.
//
//   stepjit_benchmarks --benchmark_filter=Step --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)
// Counters of compiled runs: kernels per replay, ops_traced (the ops the
// eager step dispatches) and compile_ms (trace, passes and code generation).
// Step/<w>/compiled runs with verification off; compiled_verify_always adds
// a shape-only re-trace to every call (verify_us, verify_us_per_op: its own
// cost) and compiled_check_always the accuracy checker.
#include <benchmark/benchmark.h>

#include "bench/workloads.h"
#include "codegen/cpu/region_kernel.h"
#include "ir/parser.h"
#include "program/cpu/cpu_backend.h"

namespace stepjit::bench {
namespace {

// What a compiled replay adds on top of the program: nothing (verify off),
// a shape-only re-trace per call (verify always), or the accuracy checker
// per call (the eager step plus every region run twice, then compared).
enum class Extra { kNone, kVerifyAlways, kCheckAlways };

void BM_Step(benchmark::State& state, const Workload* w, bool compiled,
             Extra extra = Extra::kNone) {
  CompileOptions options{.mode = compiled ? Mode::kCompiled : Mode::kEager};
  options.verify =
      extra == Extra::kVerifyAlways ? Verify::kAlways : Verify::kOffUnsafe;
  if (extra == Extra::kCheckAlways) {
    options.check = true;
    options.check_replays = 1 << 30;
  }
  WorkloadRun run(*w, options);
  for (int64_t i = 0; i < run.StepsToWarm(); ++i) run.Step();
  for (auto _ : state) {
    Tensor loss = run.Step();
    benchmark::DoNotOptimize(loss.data_ptr());
  }
  const CompileStats s = run.stats();
  if (compiled) {
    state.counters["kernels"] = s.kernels_per_step;
    state.counters["ops_traced"] = s.ops_per_step;
    state.counters["compile_ms"] = s.compile_ms;
    if (extra == Extra::kVerifyAlways && s.verifications > 0) {
      // The re-trace alone, per call and per traced op.
      state.counters["verify_us"] = 1e3 * s.verify_ms / static_cast<double>(s.verifications);
      state.counters["verify_us_per_op"] =
          1e3 * s.verify_ms / static_cast<double>(s.verifications) / s.ops_per_step;
    }
    if (extra == Extra::kCheckAlways) state.counters["check_failures"] = s.check_failures;
  }
  state.counters["batch_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                                     benchmark::Counter::kIsRate);
}

// AdamW's update of one 512x784 weight: the generated region vs the eager
// op chain it replaces (8 kernels, 7 temporaries). Bytes: 4 f32 arrays read,
// 3 written.
constexpr char kAdamRegion[] = R"(
graph @adamw(%p0: f32[512,784] input, %p1: f32[512,784] input, %p2: f32[512,784] input, %p3: f32[512,784] input) {
  %0 = full {shape = [], value = 0.99999, dtype = f32} : f32[]
  %1 = mul_ %p0, %0 {in_place = true} : f32[512,784]
  %2 = full {shape = [], value = 0.1, dtype = f32} : f32[]
  %3 = lerp_ %p1, %p2, %2 {in_place = true} : f32[512,784]
  %4 = full {shape = [], value = 0.999, dtype = f32} : f32[]
  %5 = mul_ %p3, %4 {in_place = true} : f32[512,784]
  %6 = addcmul_ %5, %p2, %p2 {value = 0.001, in_place = true} : f32[512,784]
  %7 = sqrt %6 : f32[512,784]
  %8 = full {shape = [], value = 1e-08, dtype = f32} : f32[]
  %9 = add %7, %8 : f32[512,784]
  %10 = div %3, %9 : f32[512,784]
  %11 = add_ %1, %10 {alpha = -0.001, in_place = true} : f32[512,784]
  return %3, %6, %11
})";

void BM_AdamWRegion(benchmark::State& state, bool generated) {
  Generator gen(1);
  Tensor w = randn({512, 784}, {}, &gen), m = randn({512, 784}, {}, &gen);
  Tensor g = randn({512, 784}, {}, &gen), v = rand({512, 784}, {}, &gen);
  auto body = ir::ParseGraph(kAdamRegion);
  absl::StatusOr<codegen::cpu::RegionKernel> k =
      body.ok() ? codegen::cpu::CompileRegion(**body) : absl::StatusOr<codegen::cpu::RegionKernel>(body.status());
  if (!k.ok()) {
    state.SkipWithError(std::string(k.status().message()).c_str());
    return;
  }
  for (auto _ : state) {
    if (generated) {
      runtime::cpu::RunRegionKernel(*k, {w.data_ptr(), m.data_ptr(), g.data_ptr(), v.data_ptr(),
                                    m.data_ptr(), v.data_ptr(), w.data_ptr()});
    } else {
      w.mul_(0.99999);
      m.lerp_(g, 0.1);
      v.mul_(0.999).addcmul_(g, g, 0.001);
      w.add_(m / (sqrt(v) + 1e-8), -0.001);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 7 * w.numel() * 4);
}

int Register() {
  for (const Workload& w : Workloads()) {
    for (bool compiled : {false, true}) {
      benchmark::RegisterBenchmark(
          ("Step/" + w.name + (compiled ? "/compiled" : "/eager")).c_str(),
          [&w, compiled](benchmark::State& s) { BM_Step(s, &w, compiled); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
    for (auto [suffix, extra] : {std::pair{"verify_always", Extra::kVerifyAlways},
                                 std::pair{"check_always", Extra::kCheckAlways}}) {
      benchmark::RegisterBenchmark(
          ("Step/" + w.name + "/compiled_" + suffix).c_str(),
          [&w, extra](benchmark::State& s) { BM_Step(s, &w, true, extra); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  benchmark::RegisterBenchmark("Region/adamw_512x784/generated",
                               [](benchmark::State& s) { BM_AdamWRegion(s, true); })
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("Region/adamw_512x784/eager_ops",
                               [](benchmark::State& s) { BM_AdamWRegion(s, false); })
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  return 0;
}
const int kRegistered = Register();

}  // namespace
}  // namespace stepjit::bench
