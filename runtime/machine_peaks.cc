// The FMA loop and the triad of runtime/machine_peaks.h.
#include "runtime/machine_peaks.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

namespace stepjit::runtime {

__attribute__((target("avx512f"))) float Sum16(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float t = 0;
  for (float x : lanes) t += x;
  return t;
}

namespace {

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

// Runs `work` on `threads` threads at once; the best wall time of `runs`.
double BestWallSeconds(int threads, int runs,
                       const std::function<void(int)>& work) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
    work(0);
    for (std::thread& th : pool) th.join();
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - t0)
                              .count());
  }
  return best;
}

volatile float g_sink = 0;  // keeps the loops' results

}  // namespace

int FmaLanes() {
  if (__builtin_cpu_supports("avx512f")) return 16;
  return __builtin_cpu_supports("fma") ? 8 : 0;
}

const char* FmaIsa() {
  switch (FmaLanes()) {
    case 16:
      return "avx512 f32";
    case 8:
      return "avx2 f32";
  }
  return "none";
}

float FmaLoop(int64_t iters) {
  return FmaLanes() == 16  ? FmaLoop512(iters)
         : FmaLanes() == 8 ? FmaLoop256(iters)
                           : 0;
}

double MeasureFmaGflops(int threads, int64_t iters, int runs) {
  if (FmaLanes() == 0) return 0;
  const double s =
      BestWallSeconds(threads, runs, [iters](int) { g_sink = FmaLoop(iters); });
  return 2.0 * FmaLanes() * kAccumulators * static_cast<double>(iters) *
         threads / s / 1e9;
}

double MeasureTriadGbPerS(int threads, int64_t floats_per_thread, int runs) {
  const int64_t n = floats_per_thread;
  std::vector<std::vector<float>> a(threads, std::vector<float>(n)),
      b(threads, std::vector<float>(n, 1.0f)),
      c(threads, std::vector<float>(n, 2.0f));
  const double s = BestWallSeconds(threads, runs, [&](int t) {
    float* __restrict pa = a[t].data();
    const float* __restrict pb = b[t].data();
    const float* __restrict pc = c[t].data();
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    g_sink = pa[n / 2];
  });
  return 12.0 * static_cast<double>(n) * threads / s / 1e9;
}

}  // namespace stepjit::runtime
