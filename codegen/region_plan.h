// Fusion-region analysis shared by the CPU and CUDA code generators: which
// values of a region body are 0-d, full-size or reduced, and the shapes of
// the loops over them.
//
// A body is lowered in up to three phases (see codegen/cpu/region_kernel.h):
//   scalar   0-d values, computed once;
//   full     elementwise and broadcast chains over the region's full shape
//            F, feeding the reductions (sum, mean, amax over one set of dims);
//   reduced  the reductions' results and the epilogue over the reduced shape R.
#ifndef STEPJIT_CODEGEN_REGION_PLAN_H_
#define STEPJIT_CODEGEN_REGION_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace stepjit::codegen {

enum class Domain : uint8_t { kScalar, kFull, kReduced };

// Where every value of a body lives, and how F and R are shaped.
struct Plan {
  ir::Shape f_shape;
  int64_t f_numel = 0;
  std::vector<bool> f_reduced;  // per F dim: reduced by the region's reductions
  int64_t r_numel = 0;          // 0: the region has no reductions
  bool row_loop = false;        // broadcast operands or reductions
  absl::flat_hash_map<const ir::Value*, Domain> domain;
};

struct AnalyzeOptions {
  // A region of one element runs entirely as scalar work. Fused regions
  // refuse it (not worth a kernel); single-op eager kernels need it.
  bool allow_one_element = false;
  // Integer (i32/i64) operands and results, for casts, comparisons, where
  // and views; integer arithmetic and reductions stay refused. The CUDA
  // emitter lowers them; the CPU backend leaves them to the interpreter.
  bool allow_integers = false;
};

// Unimplemented (with the reason) when the body holds something the code
// generators do not lower: normalizations, losses, matmuls, nested regions,
// integer arithmetic, reductions over different dims, 1-element regions.
absl::StatusOr<Plan> Analyze(const ir::Graph& body,
                             const AnalyzeOptions& options = {});

inline bool IsHalf(ir::DType t) {
  return t == ir::DType::kF16 || t == ir::DType::kBF16;
}
inline bool IsFloat(ir::DType t) {
  return t == ir::DType::kF32 || t == ir::DType::kF64 || IsHalf(t);
}
inline int64_t Numel(const ir::Value* v) {
  return ir::NumElements(v->type().shape);
}
inline bool IsReduction(ir::OpId op) {
  return op == ir::OpId::kSum || op == ir::OpId::kMean || op == ir::OpId::kAmax;
}
inline bool IsOrderPreservingView(ir::OpId op) {
  return op == ir::OpId::kReshape || op == ir::OpId::kSqueeze ||
         op == ir::OpId::kUnsqueeze;
}

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_REGION_PLAN_H_
