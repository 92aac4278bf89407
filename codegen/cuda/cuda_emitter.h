// CUDA code generation for fusion regions: IR body -> CUDA C source text
// (one translation unit of extern "C" __global__ kernels) for NVRTC.
//
// The region analysis is the CPU backend's (codegen/region_plan.h); a body is
// lowered into up to three kernels, launched in this order on one stream:
//   <name>_scalar   <<<1, 1>>>: the 0-d values (AdamW's step count and bias
//                   corrections, constants) once; the ones the other kernels
//                   read go to 8-byte scratch slots, 0-d returns are stored.
//   <name>_main     elementwise and broadcast chains over the full shape F:
//                   a grid-stride loop (without broadcast operands, 4
//                   elements per thread as one vector load and store when
//                   every pointer is aligned for it), or, with reductions,
//                   partial results per (output, chunk) written to the
//                   accumulator buffers:
//                     kBlockPerRow      the innermost dim of F is reduced:
//                                       a block walks a chunk of one output's
//                                       elements and reduces with warp
//                                       shuffles;
//                     kThreadPerOutput  column reductions (and short rows): a
//                                       thread walks a chunk for one output, so
//                                       neighbouring threads read neighbouring
//                                       columns.
//   <name>_reduced  over the reduced shape R: combines the partials in a fixed
//                   order (double, like the CPU backend), divides means, and
//                   computes the epilogue (e.g. a bias gradient's momentum).
// A row plan (codegen/region_plan.h: softmax, log_softmax, layer_norm, var,
// cross_entropy, mse_loss, their backward patterns, with their elementwise
// neighbours) lowers instead into (cuda_emitter_rows.cc):
//   <name>_scalar   as above.
//   <name>_main     rows in a grid-stride loop, each row owned by one warp
//                   (kRowPerWarp, rows of up to kMaxWarpRow elements) or one
//                   block (kRowPerBlock, longer rows), or one thread
//                   (kRowPerThread, when asked for); per row: the row's
//                   per-row params and the values computed from them, then
//                   per phase a strided loop over the row accumulating that
//                   phase's reductions in double, an all-reduction (warp
//                   shuffles, plus shared memory across warps) that gives
//                   every thread the same bits, and the row values that
//                   follow; then a strided loop storing the full-size
//                   returns, the per-row returns, and each row's value of a
//                   total (a loss's mean over rows) in acc<a>[row].
//   <name>_reduced  (only with totals; one block, thread 0) folds acc<a> in
//                   row order from 0.0 (or -inf), as the CPU backend does,
//                   and computes and stores the 0-d values that follow.
//                   No atomics: results are the same run to run.
// f16/bf16 values load and store as __half/__nv_bfloat16 and compute in
// float, rounded after every op exactly as the eager kernels do. i32/i64
// values (int, long long) take part in casts, comparisons and where; integer
// arithmetic and reductions are refused; a 0-d integer crosses kernels as
// the bits of its scratch slot. Indices are 32-bit
// unless F has (nearly) 2^31 elements or more.
#ifndef STEPJIT_CODEGEN_CUDA_CUDA_EMITTER_H_
#define STEPJIT_CODEGEN_CUDA_CUDA_EMITTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codegen/cuda/cuda_c.h"
#include "ir/graph.h"

namespace stepjit::codegen::cuda {

struct KernelLaunch {
  std::string name;  // the extern "C" symbol
  int64_t grid = 1;  // blocks (x); grid-stride loops cover the rest
  int block = 1;     // threads per block
};

enum class ReductionStrategy : uint8_t {
  kNone,
  kBlockPerRow,
  kThreadPerOutput,
  kRowPerWarp,    // row plans, short rows: a warp per row
  kRowPerBlock,   // row plans, long rows: a block per row
  kRowPerThread,  // row plans, EmitOptions::max_thread_row: a thread per row
};

// Row plans take a warp per row up to this row length (32 elements per lane
// at most, and a row's warp needs no shared memory or block barrier), a
// block per row beyond.
inline constexpr int64_t kMaxWarpRow = 1024;

// Every kernel of a region takes the same arguments, in this order:
//   one `const T*` per body parameter, one `T*` per body return (the
//   parameter's pointer again where an in-place update writes it back),
//   `double* scratch` (num_slots slots; may be null when 0), and one
//   `double*` buffer of `partials` elements per reduction.
// T is float, double, __half, __nv_bfloat16, or unsigned char for bool.
struct RegionSource {
  std::string name;                   // symbol prefix; also names dump files
  std::string source;                 // the whole translation unit
  std::string kernels_text;           // the kernel definitions alone
  uint32_t helpers = 0;               // Helpers bits (cuda_c.h) the kernels use
  std::vector<KernelLaunch> kernels;  // in launch order
  // The kernels' parameter declarations ("const float* p0", ..., "double*
  // scratch", "double* acc0"), in argument order.
  std::vector<std::string> params;
  int64_t numel = 0;                  // elements of F
  int64_t reduced_numel = 0;          // elements of R (0: no reductions)
  ReductionStrategy strategy = ReductionStrategy::kNone;
  int64_t chunks = 1;    // partial results per reduced element
  // reduced_numel * chunks; for a row plan with totals, one per row (0
  // without totals).
  int64_t partials = 0;
  int64_t rows = 0, row_len = 0;  // row plans: rows of F and their length
  int num_accumulators = 0;
  int num_slots = 0;
  bool index64 = false;  // 64-bit indexing (numel near or over 2^31)
  // A shape-generic region (EmitOptions::shape_generic): its kernels take
  // one more argument, `const sj_dims_t sj_dims` (kMaxDims long longs, by
  // value), whose first entries are these sizes.
  bool shape_generic = false;
  std::vector<int64_t> dims;
};

struct EmitOptions {
  int block = 256;  // threads per block, a multiple of 32
  // Allow a region of one element (all scalar work); single-op kernels need it.
  bool allow_one_element = false;
  // Row plans: rows of at most this many elements run one per thread, which
  // sums each row in element order as the eager CPU kernels do, so that
  // single-op eager kernels match them bit for bit (0: never).
  int64_t max_thread_row = 0;
  // Emit the kernels as `__device__` functions taking two more arguments,
  // `sj_bid` and `sj_grid`, in place of blockIdx.x and gridDim.x, for a
  // kernel that runs several regions in one launch (multi_region.h).
  bool device_functions = false;
  // Read the sizes of the kernels' loops and index arithmetic from a
  // run-time argument instead of compiling them in (RegionSource::dims), so
  // that bodies differing only in sizes of 2 or more emit the same source
  // and share one compiled module. Not with device_functions. A body needing
  // more than kMaxDims sizes is emitted specialized (shape_generic false).
  bool shape_generic = false;
};

// Lowers `body`. Unimplemented, with the reason, when the body holds
// something the region analysis refuses (as for the CPU backend).
absl::StatusOr<RegionSource> EmitRegion(const ir::Graph& body,
                                        const EmitOptions& options = {});

// One translation unit holding every region's kernels (and each helper once);
// a region given twice (same name) appears once.
std::string CombineSources(absl::Span<const RegionSource* const> regions);

}  // namespace stepjit::codegen::cuda

#endif  // STEPJIT_CODEGEN_CUDA_CUDA_EMITTER_H_
