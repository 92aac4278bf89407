// How a region's full shape F maps onto CUDA threads: F's dims merged where
// every operand walks them alike, the reduction strategy and its chunks, and
// the C text of the index arithmetic the kernels use.
#ifndef STEPJIT_CODEGEN_CUDA_CUDA_LAYOUT_H_
#define STEPJIT_CODEGEN_CUDA_CUDA_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/cuda_math.h"
#include "codegen/region_plan.h"

namespace stepjit::codegen::cuda {

// Grid-stride loops cap the grid at this many blocks.
inline constexpr int64_t kMaxGrid = 1 << 16;

// Entries of a shape-generic kernel's run-time sizes (`sj_dims_t`, passed by
// value as its last argument; cuda_c.h kHelperDims defines it).
inline constexpr int kMaxDims = 32;

// The sizes a kernel's index arithmetic uses, as C text: literals, or for a
// shape-generic kernel (EmitOptions::shape_generic) entries of its run-time
// table, `((sj_index)sj_dims.d[k])`, whose values() the launch passes.
class SizeText {
 public:
  explicit SizeText(bool generic) : generic_(generic) {}
  std::string operator()(int64_t v);
  // As a double (a mean's count).
  std::string AsDouble(int64_t v);
  bool generic() const { return generic_; }
  const std::vector<int64_t>& values() const { return values_; }

 private:
  bool generic_;
  std::vector<int64_t> values_;
};

// One dim of F after dropping extent-1 dims and merging neighbours that are
// traversed alike; strides[0] is F's, strides[1 + k] broadcast operand k's.
struct Dim {
  int64_t extent;
  bool reduced;
  std::vector<int64_t> strides;
};

struct Layout {
  std::vector<Dim> dims;
  ReductionStrategy strategy = ReductionStrategy::kNone;
  int64_t r_numel = 0;  // outputs of the reductions (R)
  int64_t q = 1;        // elements reduced into each
  int64_t chunks = 1,
          chunk_len = 1;  // partials per output, elements per partial
  bool index64 = false;
  // How the methods below write sizes (null: as literals).
  SizeText* sizes = nullptr;

  bool HasKeptDims() const;
  // Defines d<j> for the dims of one kind (reduced or kept) from `var`, the
  // row-major linear index over them; with `broadcast_only`, just the dims
  // some broadcast operand walks.
  void Unravel(bool reduced, const std::string& var, CudaStatements& s,
               bool broadcast_only = false) const;
  // The offset into operand `operand` (0: F itself) from the d<j>.
  std::string Offset(size_t operand) const;
  // Where partial `c` of reduced element `r` lives in an accumulator buffer.
  std::string AccIndex(const std::string& r, const std::string& c) const;
  // Defines [q_begin, q_end): the reduced elements of chunk c.
  void ChunkBounds(CudaStatements& s) const;

 private:
  std::string Lit(int64_t v) const;
};

// `broadcast` are the parameters read at F's multi-index through broadcasting.
Layout PlanLayout(const Plan& plan,
                  absl::Span<const ir::Value* const> broadcast, int block);

}  // namespace stepjit::codegen::cuda

#endif  // STEPJIT_CODEGEN_CUDA_CUDA_LAYOUT_H_
