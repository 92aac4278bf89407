// This machine's limits (bench/machine_limits.h), on 1 and 2 threads, as
// Google benchmarks: the f32 FMA peak, the bf16 dot-product peak and the
// STREAM triad bandwidth. The triad's bytes are 3 x 4 per element (it writes
// a without reading it, non-temporal stores aside).
//
//   stepjit_benchmarks --benchmark_filter=Peak
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "bench/machine_limits.h"

namespace stepjit::bench {
namespace {

// Times `loop` (a peak loop of machine_limits.h) and counts GFLOPS:
// `flops_per_iter` per accumulator and iteration.
void TimePeakLoop(benchmark::State& state, float (*loop)(int64_t),
                  double flops_per_iter) {
  constexpr int64_t kIters = 1 << 20;
  for (auto _ : state) {
    int64_t iters = kIters;
    benchmark::DoNotOptimize(iters);  // not hoisted out of the timed loop
    benchmark::DoNotOptimize(loop(iters));
  }
  state.counters["GFLOPS"] = benchmark::Counter(
      flops_per_iter * kAccumulators * kIters * state.iterations(),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// bf16 dot-product peak (FLOP/s = 2 per bf16 multiply-add), where the CPU
// has AVX512_BF16.
void BM_PeakDpBf16(benchmark::State& state) {
  if (!HasDpBf16()) {
    state.SkipWithError("no AVX512_BF16 on this CPU");
    return;
  }
  TimePeakLoop(state, DpBf16Loop, 2.0 * 32);
}
BENCHMARK(BM_PeakDpBf16)
    ->Name("Peak/dp_bf16")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// f32 FMA peak of the widest vectors this CPU has; with ->Threads(2) the
// counter sums both threads' work over the wall time.
void BM_PeakFmaF32(benchmark::State& state) {
  const int lanes = FmaLanes();
  if (lanes == 0) {
    state.SkipWithError("no FMA on this CPU");
    return;
  }
  TimePeakLoop(state, FmaLoop, 2.0 * lanes);
  state.SetLabel(FmaIsa());
}
BENCHMARK(BM_PeakFmaF32)
    ->Name("Peak/fma_f32")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// STREAM triad over 3 x 64 MiB per thread (each thread its own arrays).
void BM_PeakTriad(benchmark::State& state) {
  constexpr int64_t kN = 16 << 20;  // floats per array
  std::vector<float> a(kN), b(kN, 1.0f), c(kN, 2.0f);
  const float s = 3.0f;
  for (auto _ : state) {
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
    for (int64_t i = 0; i < kN; ++i) pa[i] = pb[i] + s * pc[i];
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(12.0 * kN * state.iterations(),
                                              benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_PeakTriad)
    ->Name("Peak/triad_f32")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

}  // namespace
}  // namespace stepjit::bench
