// The CPU JIT: one process-wide ORC LLJIT for the host CPU. Modules are
// optimized (-O2 for the host's features) and compiled to object code, which
// goes through the kernel cache (memory and verified disk entries) before it
// is linked into its own JITDylib.
#ifndef STEPJIT_CODEGEN_CPU_JIT_H_
#define STEPJIT_CODEGEN_CPU_JIT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace llvm {
class Module;
}  // namespace llvm

namespace stepjit::codegen::cpu {

// Function symbols to resolve in a module; empty names are skipped.
struct JitSymbols {
  std::string scalar, main, reduced;
};
struct JitAddresses {
  uint64_t scalar = 0, main = 0, reduced = 0;
};

struct JitLoadOptions {
  // Produce the optimized IR text even when the object comes from a cache.
  bool want_optimized_ir = false;
  // Look up and store objects in the process-wide kernel cache.
  bool use_cache = true;
  // Versions the code generator into the cache key (e.g. the lowering's).
  std::string cache_tag;
};

struct JitLoadResult {
  JitAddresses fns;
  std::string llvm_ir_raw;  // the module as handed in
  std::string llvm_ir;      // after -O2 (empty on a cache hit unless asked)
  std::string cache_key;    // CacheKey::Digest() of the object (kernel_cache.h)
  bool cache_hit = false;
};

// Optimizes, compiles (or finds in the cache) and loads `module`, then
// resolves `symbols`. The module is changed (data layout, optimization).
// Threads may load modules (each in its own LLVMContext) concurrently.
// Errors: the JIT could not start, or compiling/linking failed.
absl::StatusOr<JitLoadResult> JitLoad(llvm::Module& module, const JitSymbols& symbols,
                                      const JitLoadOptions& options);

// "LLVM 14.0.6", and the host's triple, CPU name and features: both are
// part of every cache key.
std::string JitCompilerId();
std::string JitTargetId();

}  // namespace stepjit::codegen::cpu

#endif  // STEPJIT_CODEGEN_CPU_JIT_H_
