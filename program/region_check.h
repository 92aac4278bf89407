// The accuracy checker's comparisons: tensors within a dtype's tolerance,
// and the report of a fusion region whose generated code disagrees with its
// body interpreted op by op (Program::RunChecked, program/executor.h).
//
// Tolerance rule: a compiled value `got` agrees with the reference `want`
// when |got - want| <= atol + rtol * |want|, with (rtol, atol) by dtype:
//   f64        1e-12, 1e-12  (~4500 ulp: only reassociation may differ)
//   f32        1e-5,  1e-6   (~80 ulp: both paths accumulate reductions in
//                             f64, in different orders, so a sum may
//                             round to a neighbouring f32)
//   f16, bf16  1e-2,  1e-3   (one bf16 rounding step near 1 is 7.8e-3)
//   integers, bool           exact
// NaN agrees only with NaN; an infinity only with the same infinity.
#ifndef STEPJIT_PROGRAM_REGION_CHECK_H_
#define STEPJIT_PROGRAM_REGION_CHECK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/infer.h"
#include "ir/printer.h"
#include "ir/shape.h"
#include "runtime/tensor.h"

namespace stepjit::runtime {

struct Tolerance {
  double rtol = 0;
  double atol = 0;
};
// The rule above for dtype `t`.
Tolerance DefaultTolerance(ir::DType t);

// How far a tensor is from its reference, element by element.
struct TensorDiff {
  int64_t numel = 0;
  int64_t mismatched_elements = 0;  // outside the tolerance
  // Over all elements; +inf where a NaN or an infinity disagrees, and the
  // relative error where the reference is 0 and the value is not.
  double max_abs_error = 0;
  double max_rel_error = 0;
  // The mismatched element of largest absolute error (row-major index, -1
  // when none) and its two values.
  int64_t worst_index = -1;
  double got_at_worst = 0;
  double want_at_worst = 0;
  bool shape_differs = false;  // then every element counts as mismatched
  bool ok() const { return mismatched_elements == 0 && !shape_differs; }
};

// Compares `got` with the reference `want` on any device and layout, under
// `DefaultTolerance` of the less precise of their dtypes, or under `tol`.
TensorDiff CompareTensors(const Tensor& got, const Tensor& want);
TensorDiff CompareTensors(const Tensor& got, const Tensor& want, Tolerance tol);

// "3 of 100 elements differ; max abs error 0.5, max rel error 0.25; worst at
// [1, 4]: got 2.5, want 2" (coordinates in `shape`, the reference's).
std::string ToString(const TensorDiff& diff, ir::ShapeRef shape);

// One result of a generated fusion region that disagrees with the region's
// body interpreted on the same operands. The error fields (TensorDiff) are
// those of the generated result (`got`) against the interpreted one (`want`).
struct RegionMismatch : TensorDiff {
  std::string region;   // the fusion node's callee, e.g. "fused_3"
  int node_index = -1;  // position in the top-level graph's nodes()
  int output = 0;       // which result of the region
  // The body op producing that result ("lerp_"; "parameter" when the body
  // returns a parameter), and as the body prints it ("%6 = lerp_ %p3, %p2").
  std::string op;
  std::string op_ir;
  std::string value;      // the result's name in the top-level graph: "%9#1"
  std::string call_ir;    // "%9 = fusion @fused_3(%g, %m, %v, %w0, %lr)"
  ir::TensorType type;    // of the result
  std::string region_ir;  // the region's body as IR text
};

// One line: "fused_3 result 1 (%9#1, from `%6 = lerp_ %p3, %p2, %5`, node 7,
// f32[300,257]): <ToString(diff)>" (the region's IR is not included).
std::string ToString(const RegionMismatch& m);

// The reports of one checked run of a top-level graph, in run order.
class RegionChecker {
 public:
  explicit RegionChecker(const ir::Graph& graph);

  // Copies of a region's operands, taken before its generated kernel runs
  // (it may write donated operands in place).
  static std::vector<Tensor> Snapshot(absl::Span<const Tensor> operands);
  // Compares `region`'s generated results with its interpreted ones (in
  // result order) and records each that disagrees.
  void Compare(const ir::Node& region, absl::Span<const Tensor> generated,
               absl::Span<const Tensor> interpreted);
  std::vector<RegionMismatch> Take() { return std::move(mismatches_); }

 private:
  const ir::Graph& graph_;
  // Made at the first mismatch: a clean run prints nothing.
  std::optional<ir::ValueNames> names_;
  absl::flat_hash_map<const ir::Node*, int> positions_;
  std::vector<RegionMismatch> mismatches_;
};

}  // namespace stepjit::runtime

#endif  // STEPJIT_PROGRAM_REGION_CHECK_H_
