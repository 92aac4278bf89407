// The f32 FMA peak loop and the STREAM triad: this machine's compute and
// memory peaks, for the profiler's summary (runtime/profiler.h) and the
// benchmarks' limits (bench/machine_limits.h).
#ifndef STEPJIT_RUNTIME_MACHINE_PEAKS_H_
#define STEPJIT_RUNTIME_MACHINE_PEAKS_H_

#include <immintrin.h>

#include <cstdint>

namespace stepjit::runtime {

// The 16 lanes' sum (through memory: GCC 12's _mm512_reduce_add_ps warns
// under -fsanitize builds). Only on a CPU with AVX-512.
__attribute__((target("avx512f"))) float Sum16(__m512 v);

// A register-only loop of independent fused multiply-adds on one thread;
// returns a value that depends on every chain so that the loop is not
// dropped. Multiply-adds per call: FmaLanes() * kAccumulators * iters.
inline constexpr int kAccumulators = 12;  // > FMA latency x ports (4 x 2)
float FmaLoop(int64_t iters);
int FmaLanes();        // 16 with AVX-512, 8 with AVX2, 0 without FMA
const char* FmaIsa();  // "avx512 f32", "avx2 f32" or "none"

// The f32 FMA rate of `threads` threads at once (GFLOP/s, 2 per
// multiply-add; 0 without FMA), and the triad a[i] = b[i] + s * c[i]
// (GB/s, 3 x 4 bytes per element) over `floats_per_thread`-element arrays
// per thread; each the best of `runs`.
double MeasureFmaGflops(int threads, int64_t iters, int runs);
double MeasureTriadGbPerS(int threads, int64_t floats_per_thread, int runs);

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_MACHINE_PEAKS_H_
