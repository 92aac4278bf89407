// Single-op bodies for the eager CUDA kernels.
#include "codegen/cuda/single_op.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace stepjit::codegen::cuda {

absl::StatusOr<std::unique_ptr<ir::Graph>> SingleOpBody(
    ir::OpId op, absl::Span<const ir::TensorType> inputs,
    const ir::Attrs& attrs) {
  ASSIGN_OR_RETURN(ir::TensorType type, ir::InferType(op, inputs, attrs));
  // Op and dtype names are identifiers already ([a-z0-9_]).
  std::string name(ir::OpName(op));
  for (const ir::TensorType& t : inputs) {
    absl::StrAppend(&name, "_", ir::DTypeName(t.dtype));
  }
  auto g = std::make_unique<ir::Graph>(name);
  std::vector<ir::Value*> params;
  for (size_t k = 0; k < inputs.size(); ++k) {
    params.push_back(
        g->AddParam(absl::StrCat("p", k), inputs[k], ir::ParamKind::kInput));
  }
  g->SetReturns({g->AddOp(op, params, attrs, type)->output()});
  return g;
}

absl::StatusOr<RegionSource> EmitSingleOp(
    ir::OpId op, absl::Span<const ir::TensorType> inputs,
    const ir::Attrs& attrs, EmitOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> body,
                   SingleOpBody(op, inputs, attrs));
  options.allow_one_element = true;
  return EmitRegion(*body, options);
}

}  // namespace stepjit::codegen::cuda
