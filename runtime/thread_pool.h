// ParallelFor for splitting kernels across cores, on the OpenMP threads the
// GEMM library (oneDNN) runs on.
#ifndef STEPJIT_RUNTIME_THREAD_POOL_H_
#define STEPJIT_RUNTIME_THREAD_POOL_H_

#include <cstdint>
#include <functional>

namespace stepjit::runtime {

// Threads used by kernels: STEPJIT_NUM_THREADS, else the number of cores.
int NumThreads();

// Calls fn(begin, end) over disjoint chunks covering [0, n), at most
// NumThreads() of them at once. Runs inline when n < 2 * grain or when called
// from inside a parallel region (no nested fan-out). An exception thrown by
// fn is rethrown to the caller after every chunk has finished.
void ParallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn);

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_THREAD_POOL_H_
