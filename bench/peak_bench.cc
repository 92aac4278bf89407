// This machine's limits, to quote ratios against: the f32 FMA peak (a loop
// of independent fused multiply-adds on registers only, no memory), the bf16
// dot-product peak (AVX512_BF16, the instruction bf16 GEMMs use) and the
// STREAM triad bandwidth (a[i] = b[i] + s * c[i] over arrays far larger than
// the caches), on 1 and 2 threads. FLOP/s counts 2 per multiply-add; the
// triad's bytes are 3 x 4 per element (it writes a without reading it,
// non-temporal stores aside).
//
//   stepjit_benchmarks --benchmark_filter=Peak
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdint>
#include <vector>

namespace stepjit::bench {
namespace {

constexpr int kAccumulators = 12;  // > FMA latency x ports (4 x 2)

// The 16 lanes' sum (through memory: GCC 12's _mm512_reduce_add_ps warns
// under -fsanitize builds).
__attribute__((target("avx512f"))) float Sum16(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float t = 0;
  for (float x : lanes) t += x;
  return t;
}

// kAccumulators independent chains of `iters` steps each; returns a value
// that depends on every chain so the loop is not dropped.
__attribute__((target("avx512f"))) float FmaLoop512(int64_t iters) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 a = _mm512_set1_ps(0.9999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12  // the accumulators stay in registers
    for (int i = 0; i < kAccumulators; ++i)
      acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAccumulators; ++i) s = _mm512_add_ps(s, acc[i]);
  return Sum16(s);
}

__attribute__((target("avx2,fma"))) float FmaLoop256(int64_t iters) {
  __m256 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 a = _mm256_set1_ps(0.9999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12  // the accumulators stay in registers
    for (int i = 0; i < kAccumulators; ++i)
      acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kAccumulators; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  float t = 0;
  for (float v : out) t += v;
  return t;
}

// bf16 pairs into f32 (vdpbf16ps: 32 multiply-adds per 512-bit instruction).
__attribute__((target("avx512f,avx512bf16"))) float DpbfLoop512(int64_t iters) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3380);  // bf16 ~6e-8
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAccumulators; ++i) {
      acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
      asm volatile("" : "+v"(acc[i]));  // no folding of the chain
    }
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAccumulators; ++i) s = _mm512_add_ps(s, acc[i]);
  return Sum16(s);
}

// bf16 dot-product peak (FLOP/s = 2 per bf16 multiply-add), where the CPU
// has AVX512_BF16.
void BM_PeakDpBf16(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) {
    state.SkipWithError("no AVX512_BF16 on this CPU");
    return;
  }
  constexpr int64_t kIters = 1 << 20;
  for (auto _ : state) {
    int64_t iters = kIters;
    benchmark::DoNotOptimize(iters);  // not hoisted out of the timed loop
    benchmark::DoNotOptimize(DpbfLoop512(iters));
  }
  state.counters["GFLOPS"] = benchmark::Counter(
      2.0 * 32 * kAccumulators * kIters * state.iterations(),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_PeakDpBf16)
    ->Name("Peak/dp_bf16")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// f32 FMA peak of the widest vectors this CPU has; with ->Threads(2) the
// counter sums both threads' work over the wall time.
void BM_PeakFmaF32(benchmark::State& state) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("fma")) {
    state.SkipWithError("no FMA on this CPU");
    return;
  }
  const int lanes = avx512 ? 16 : 8;
  constexpr int64_t kIters = 1 << 20;
  for (auto _ : state) {
    int64_t iters = kIters;
    benchmark::DoNotOptimize(iters);  // not hoisted out of the timed loop
    benchmark::DoNotOptimize(avx512 ? FmaLoop512(iters) : FmaLoop256(iters));
  }
  state.counters["GFLOPS"] = benchmark::Counter(
      2.0 * lanes * kAccumulators * kIters * state.iterations(),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetLabel(avx512 ? "avx512 f32" : "avx2 f32");
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
