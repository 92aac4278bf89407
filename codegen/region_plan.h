// Fusion-region analysis shared by the CPU and CUDA code generators: which
// values of a region body are 0-d, full-size or reduced, and the shapes of
// the loops over them.
//
// Row ops (softmax, log_softmax, layer_norm, var, cross_entropy, mse_loss)
// are first rewritten into primitive steps (codegen/region_expand.h); the
// plan then describes that expanded body (Plan::Body). Two plan forms:
//
// The classic plan (row_phases == 0) lowers a body in up to three phases
// (see codegen/cpu/region_kernel.h):
//   scalar   0-d values, computed once;
//   full     elementwise and broadcast chains over the region's full shape
//            F, feeding the reductions (sum, mean, amax over one set of dims);
//   reduced  the reductions' results and the epilogue over the reduced shape R.
//
// The row plan (row_phases > 0, only with AnalyzeOptions::allow_row_phases)
// takes bodies whose reductions all reduce the same trailing dims of F (a
// "row" of row_len elements; F has `rows` of them) and whose full-size work
// reads reduced row values broadcast back over the row, possibly in chains
// (max -> sum(exp(x - max)) -> x - lse; mean -> var -> normalize). Each row
// runs on its own, start to end:
//   row start  the row's kReduced params and the row values computed from
//              them alone (level 0);
//   phase k    (k = 1..row_phases) a loop over the row that recomputes, from
//              the region's inputs, the full values of level < k and folds
//              them into the reductions of phase k; then the row values of
//              level k (those reductions' results and what follows them);
//   final      a loop over the row computing every full value and storing
//              the full-size returns; then the row's kReduced returns;
//   totals     reductions of row values over all rows (a loss's mean) fold
//              each row's value in row order; after all rows the kTotal
//              values (0-d) are computed from them and stored.
// Rows are independent unless the body has totals, so they may be split
// across threads at row boundaries. Levels: a reduction over full values of
// level L runs in phase L + 1 and its result has level L + 1; any other
// value's level is the largest of its operands'.
#ifndef STEPJIT_CODEGEN_REGION_PLAN_H_
#define STEPJIT_CODEGEN_REGION_PLAN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/graph.h"

namespace stepjit::codegen {

// kTotal: 0-d values computed after every row from reductions over rows
// (row plan only).
enum class Domain : uint8_t { kScalar, kFull, kReduced, kTotal };

// Where every value of a body lives, and how F and R are shaped.
struct Plan {
  ir::Shape f_shape;
  int64_t f_numel = 0;
  std::vector<bool> f_reduced;  // per F dim: reduced by the region's reductions
  int64_t r_numel = 0;          // 0: the region has no reductions
  bool row_loop = false;        // broadcast operands or reductions
  absl::flat_hash_map<const ir::Value*, Domain> domain;

  // The body with its row ops expanded; null when it had none.
  std::shared_ptr<const ir::Graph> expanded;
  // Row plan: phases before the final one (0: the classic plan), the row
  // count and length, and each full or reduced value's level.
  int row_phases = 0;
  int64_t rows = 0;
  int64_t row_len = 0;
  absl::flat_hash_map<const ir::Value*, int> level;
  // Row plan: the in-row stride (0 or 1) of each param a full op reads
  // broadcast (neither 0-d, full nor one value per row).
  absl::flat_hash_map<const ir::Value*, int64_t> row_stride;
  bool has_totals = false;  // reductions over rows: rows run in order

  // The body the plan describes: the expanded one, or `original`.
  const ir::Graph& Body(const ir::Graph& original) const {
    return expanded ? *expanded : original;
  }
};

struct AnalyzeOptions {
  // A region of one element runs entirely as scalar work. Fused regions
  // refuse it (not worth a kernel); single-op eager kernels need it.
  bool allow_one_element = false;
  // Integer (i32/i64) operands and results; integer reductions stay
  // refused. The emitters lower what they can of the integer ops (the CPU
  // one: casts from integers, comparisons, where, views, add, sub, mul, neg,
  // maximum and minimum) and refuse the rest by name.
  bool allow_integers = false;
  // The row plan (above). Off for a generator that lowers only the classic
  // plan; Analyze then refuses bodies that need it.
  bool allow_row_phases = false;
};

// Unimplemented (with the reason) when the body holds something the code
// generators do not lower: ops ir::RegionRoleOf keeps out of regions,
// matmuls, nested regions, integer arithmetic, reductions over different
// dims, 1-element regions; without allow_row_phases also row ops and
// reduced values broadcast back over F.
absl::StatusOr<Plan> Analyze(const ir::Graph& body,
                             const AnalyzeOptions& options = {});

// Unimplemented with `why`: how Analyze and the code generators refuse a
// body they do not lower.
inline absl::Status Unsupported(absl::string_view why) {
  return absl::UnimplementedError(why);
}

inline bool IsHalf(ir::DType t) {
  return t == ir::DType::kF16 || t == ir::DType::kBF16;
}
inline bool IsFloat(ir::DType t) {
  return t == ir::DType::kF32 || t == ir::DType::kF64 || IsHalf(t);
}
inline int64_t Numel(const ir::Value* v) {
  return ir::NumElements(v->type().shape);
}
// Element strides, per dim of `f`, of an operand of `shape` broadcast
// against `f` (aligned from the right; 0 where it broadcasts).
std::vector<int64_t> BroadcastStrides(const ir::Shape& shape,
                                      const ir::Shape& f);

// `text` (a printed body) with every size of 2 or more in its types and
// shape attributes written as `?`: the name of a shape-generic kernel
// (RegionCompileOptions / EmitOptions::shape_generic), the same for bodies
// that differ only in those sizes. Only the name: which compiled code runs
// is decided by the code itself (its cache key).
std::string EraseSizes(absl::string_view text);

inline bool IsReduction(ir::OpId op) { return ir::IsFusedReduction(op); }
inline bool IsOrderPreservingView(ir::OpId op) { return ir::IsOrderedView(op); }

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_REGION_PLAN_H_
