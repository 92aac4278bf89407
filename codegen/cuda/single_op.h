// Single-op CUDA kernels for eager ops: one op wrapped as a one-node region
// body and lowered by the region emitter, so eager and fused code share the
// scalar definitions and the launch conventions.
#ifndef STEPJIT_CODEGEN_CUDA_SINGLE_OP_H_
#define STEPJIT_CODEGEN_CUDA_SINGLE_OP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codegen/cuda/cuda_emitter.h"
#include "ir/graph.h"

namespace stepjit::codegen::cuda {

// The body `op(p0, p1, ...)` with `attrs`, its one output returned, named
// `<op>_<input dtypes>` (e.g. `mul_f16_f16`). InvalidArgument when the types
// do not fit the op.
absl::StatusOr<std::unique_ptr<ir::Graph>> SingleOpBody(
    ir::OpId op, absl::Span<const ir::TensorType> inputs,
    const ir::Attrs& attrs = {});

// One eager op as kernels (elementwise, in-place update, cast, where, or a
// sum/mean/amax reduction), one-element tensors included (a scalar kernel).
// `options.allow_one_element` is always set.
absl::StatusOr<RegionSource> EmitSingleOp(
    ir::OpId op, absl::Span<const ir::TensorType> inputs,
    const ir::Attrs& attrs = {}, EmitOptions options = {});

}  // namespace stepjit::codegen::cuda

#endif  // STEPJIT_CODEGEN_CUDA_SINGLE_OP_H_
