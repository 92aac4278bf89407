// The peak loops and the measurements of bench/machine_limits.h.
#include "bench/machine_limits.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/machine_peaks.h"

namespace stepjit::bench {
namespace {

using Clock = std::chrono::steady_clock;

// bf16 pairs into f32 (vdpbf16ps: 32 multiply-adds per 512-bit instruction).
__attribute__((target("avx512f,avx512bf16"))) float DpBf16Loop512(
    int64_t iters) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3380);  // bf16 ~6e-8
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAccumulators; ++i)
      acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAccumulators; ++i) s = _mm512_add_ps(s, acc[i]);
  return runtime::Sum16(s);
}

// Runs `work` on `threads` threads at once; the best wall time of `runs`.
double BestWallSeconds(int threads, int runs,
                       const std::function<void(int)>& work) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
    work(0);
    for (std::thread& th : pool) th.join();
    best = std::min(best,
                    std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

volatile float g_sink = 0;  // keeps the loops' results

double GemmRate(DType dtype, int64_t n) {
  Generator gen(3);
  const Tensor a = randn({n, n}, {}, &gen).to(dtype),
               b = randn({n, n}, {}, &gen).to(dtype);
  Tensor c = matmul(a, b);  // warm: packing buffers, JIT kernels
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    c = matmul(a, b);
    best = std::min(best,
                    std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace

bool HasDpBf16() { return __builtin_cpu_supports("avx512bf16"); }
float DpBf16Loop(int64_t iters) {
  return HasDpBf16() ? DpBf16Loop512(iters) : 0;
}

double MachineLimits::GemmGflops(DType dtype) const {
  return dtype == DType::kF32 || dtype == DType::kF64 ? gemm_f32_gflops
                                                      : gemm_bf16_gflops;
}
double MachineLimits::PeakGflops(DType dtype) const {
  const bool low = dtype == DType::kBF16 || dtype == DType::kF16;
  return low && dp_bf16_gflops > 0 ? dp_bf16_gflops : fma_f32_gflops;
}
std::string MachineLimits::ToString() const {
  return absl::StrFormat(
      "this machine (%d threads): FMA peak %.0f GFLOP/s (%s), bf16 dot-product "
      "peak %s, triad %.1f GB/s, GEMM %lldx%lld: f32 %.0f GFLOP/s, bf16 %.0f "
      "GFLOP/s",
      threads, fma_f32_gflops, FmaIsa(),
      dp_bf16_gflops > 0 ? absl::StrFormat("%.0f GFLOP/s", dp_bf16_gflops)
                         : std::string("n/a"),
      triad_gb_per_s, static_cast<long long>(gemm_n),
      static_cast<long long>(gemm_n), gemm_f32_gflops, gemm_bf16_gflops);
}

MachineLimits MeasureMachineLimits(int threads) {
  MachineLimits m;
  m.threads = threads;
  constexpr int64_t kIters = 1 << 21;
  m.fma_f32_gflops = runtime::MeasureFmaGflops(threads, kIters, 5);
  if (HasDpBf16()) {
    const double s =
        BestWallSeconds(threads, 5, [](int) { g_sink = DpBf16Loop(kIters); });
    m.dp_bf16_gflops = 2.0 * 32 * kAccumulators * kIters * threads / s / 1e9;
  }
  // 64 MiB per array per thread: far larger than the caches.
  m.triad_gb_per_s = runtime::MeasureTriadGbPerS(threads, 16 << 20, 5);
  m.gemm_n = 1024;
  m.gemm_f32_gflops = GemmRate(DType::kF32, m.gemm_n);
  m.gemm_bf16_gflops = GemmRate(DType::kBF16, m.gemm_n);
  return m;
}

}  // namespace stepjit::bench
