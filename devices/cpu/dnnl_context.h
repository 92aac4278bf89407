// The process's oneDNN engine and stream, shared by the matmul (gemm.cc) and
// convolution (conv_dnnl.cc) primitives.
#ifndef STEPJIT_DEVICES_CPU_DNNL_CONTEXT_H_
#define STEPJIT_DEVICES_CPU_DNNL_CONTEXT_H_

#include <cstddef>
#include <vector>

#include "dnnl.hpp"

namespace stepjit::runtime::cpu {

// A CPU stream executes synchronously on the calling thread, so sharing it
// between threads is safe; primitives are immutable and may run concurrently.
struct DnnlContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

inline DnnlContext& Dnnl() {
  static DnnlContext* ctx = new DnnlContext();
  return *ctx;
}

// A per-thread buffer of at least `bytes` for a primitive's user-mode
// scratchpad: the library's own scratchpad belongs to the primitive, so two
// threads running one primitive at once would share it.
inline void* DnnlScratchpad(size_t bytes) {
  thread_local std::vector<char> scratch;
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch.data();
}

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_DEVICES_CPU_DNNL_CONTEXT_H_
