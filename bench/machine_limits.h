// This machine's limits, measured where they are quoted: the FMA peak (a
// loop of independent fused multiply-adds on registers, no memory), the bf16
// dot-product peak (AVX512_BF16's vdpbf16ps, what bf16 GEMMs run), the STREAM
// triad bandwidth (a[i] = b[i] + s * c[i] over arrays far larger than the
// caches) and the GEMM library's rate on a large square product. FLOP/s
// counts 2 per multiply-add; the triad's bytes are 3 x 4 per element.
// Used by bench/peak_bench.cc (Google Benchmark) and stepjit-bench
// --roofline.
#ifndef STEPJIT_BENCH_MACHINE_LIMITS_H_
#define STEPJIT_BENCH_MACHINE_LIMITS_H_

#include <cstdint>
#include <string>

#include "frontend/stepjit.h"
#include "runtime/machine_peaks.h"

namespace stepjit::bench {

// The register-only loops, one thread each; they return a value that
// depends on every chain so that the loop is not dropped. Multiply-adds per
// call: FmaLanes() * kAccumulators * iters (f32, runtime/machine_peaks.h),
// 32 * kAccumulators * iters (bf16 pairs).
using runtime::FmaIsa;
using runtime::FmaLanes;
using runtime::FmaLoop;
using runtime::kAccumulators;
bool HasDpBf16();                 // AVX512_BF16
float DpBf16Loop(int64_t iters);  // HasDpBf16() only

struct MachineLimits {
  int threads = 0;
  double fma_f32_gflops = 0;   // all threads
  double dp_bf16_gflops = 0;   // 0 without AVX512_BF16
  double triad_gb_per_s = 0;   // all threads
  double gemm_f32_gflops = 0;  // matmul of two n x n f32 matrices
  double gemm_bf16_gflops = 0;
  int64_t gemm_n = 0;
  // The GEMM rate of `dtype`'s products (bf16 and f16 autocast: bf16/f16
  // GEMMs; the f16 rate is not measured and reads the bf16 one).
  double GemmGflops(DType dtype) const;
  // The FMA peak of `dtype`'s GEMMs: the bf16 dot-product peak for low
  // precision where measured, else the f32 FMA peak.
  double PeakGflops(DType dtype) const;
  std::string ToString() const;
};

// Measures every limit on `threads` threads (the stepjit pool's size), each
// the best of a few runs: about a second in all.
MachineLimits MeasureMachineLimits(int threads);

}  // namespace stepjit::bench

#endif  // STEPJIT_BENCH_MACHINE_LIMITS_H_
