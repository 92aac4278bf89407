// CPU code generation for fusion regions: IR body -> LLVM IR -> object code
// (cached in memory and on disk) -> functions loaded by ORC LLJIT.
//
// A region body is lowered into up to three functions, run in this order:
//   scalar   once: every 0-d value (0-d params, constants, scalar
//            arithmetic such as AdamW's bias corrections and step count).
//            Scalars the loops need go to 8-byte scratch slots; 0-d
//            returns are stored.
//   main     a loop over the elements of the region's full shape F,
//            iterated as rows of F's last dimension: elementwise and
//            broadcast chains, full-size returns, and accumulation into
//            the region's reductions (sum, mean, amax over fixed dims).
//   reduced  a loop over the reduced shape R after main finished: the
//            reductions' final values and the epilogue computed from them
//            (e.g. a bias gradient feeding a momentum update).
// A row plan (codegen/region_plan.h: softmax, layer_norm, losses and their
// backward patterns) lowers instead into:
//   main     a loop over whole rows, [begin, end) a multiple of the row
//            length: per row, one vectorized pass over the row per phase of
//            row reductions (accumulated in f64 registers), the row values
//            they give, a final pass storing the full-size returns, the
//            row's per-row returns, and each total folded in row order;
//   reduced  (only with totals, reduced_numel 1) the 0-d values computed
//            from the totals, e.g. a mean cross-entropy loss.
// f16/bf16 values load and store as their storage type and compute in f32,
// rounding after every op exactly as the eager kernels do.
#ifndef STEPJIT_CODEGEN_CPU_REGION_KERNEL_H_
#define STEPJIT_CODEGEN_CPU_REGION_KERNEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace stepjit::codegen::cpu {

// The CPU backend's RunRegionKernel (program/cpu/cpu_backend.h)
// calls these with ptrs: one pointer per body parameter (in order), then one
// per body return, then `scratch` (num_slots 8-byte slots), then one double
// buffer of reduced_numel elements per accumulator, then (a shape-generic
// kernel with a non-empty `dims`) the dims table.
using ScalarFn = void (*)(void* const* ptrs);
using LoopFn = void (*)(void* const* ptrs, int64_t begin, int64_t end);

struct Accumulator {
  double init = 0;  // 0 for sum/mean, -inf for amax
};

struct RegionKernel {
  std::string name;               // <region>_<hash of the body>: names dump files
  ScalarFn scalar = nullptr;      // null when the region has no 0-d work
  LoopFn main = nullptr;          // over elements [begin, end) of F
  LoopFn reduced = nullptr;       // over [begin, end) of R; null without reductions
  int64_t numel = 0;              // elements of F
  int64_t row = 1;                // F's innermost extent main iterates as one row
  // main may be split across threads at element boundaries that are
  // multiples of `split_align` (1, or `row` for per-row reductions);
  // false when reductions accumulate across rows (then main runs whole).
  bool parallel = true;
  int64_t split_align = 1;
  int64_t reduced_numel = 0;
  int num_slots = 0;
  std::vector<Accumulator> accumulators;
  // A shape-generic kernel's run-time sizes for the body it was lowered
  // from: the kernel reads its loop extents, strides and counts from this
  // table, so the same code serves a body of other sizes with its own table.
  std::vector<int64_t> dims;
  std::string llvm_ir_raw;        // LLVM IR as lowered
  std::string llvm_ir;            // after the -O2 pipeline (empty on a cache hit
                                  // unless want_optimized_ir was set)
  std::string cache_key;          // the object's kernel cache key digest: the
                                  // same in every process for the same body
  bool cache_hit = false;         // object loaded from the kernel cache
  double compile_ms = 0;          // lowering + optimization + codegen (or load)
};

struct RegionCompileOptions {
  // Produce llvm_ir even when the object comes from the cache (for dumps).
  bool want_optimized_ir = false;
  // Use the process-wide kernel cache (memory and disk).
  bool use_cache = true;
  // Read every size of the region's loops from RegionKernel::dims at run
  // time instead of compiling it in (dims of 0 and 1 stay in the code: they
  // decide broadcasting). Bodies that differ only in those sizes lower to
  // the same LLVM IR, so the second one reuses the first's compiled code
  // (kernel cache hit) and differs only in its table. For the concrete
  // shapes of a step with symbolic dims (frontend/compile.h Shapes::kDynamic).
  bool shape_generic = false;
};

// Lowers and compiles `body`. Unimplemented when the region holds something
// this backend does not lower (matmuls, nested regions, integer values other
// than a cross_entropy target, reductions over different dims, 1-element
// regions): the caller then interprets it. Other errors are real failures.
absl::StatusOr<RegionKernel> CompileRegion(const ir::Graph& body,
                                           const RegionCompileOptions& options = {});


}  // namespace stepjit::codegen::cpu

#endif  // STEPJIT_CODEGEN_CPU_REGION_KERNEL_H_
