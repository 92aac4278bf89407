// One dispatch from an elementwise IR node to its scalar definition
// (ir/scalar_def.h), shared by the code generators: each supplies a Math
// backend (LlvmMath emits LLVM IR, CudaMath builds CUDA C expressions).
#ifndef STEPJIT_CODEGEN_SCALAR_OP_H_
#define STEPJIT_CODEGEN_SCALAR_OP_H_

#include <optional>
#include <vector>

#include "ir/graph.h"
#include "ir/infer.h"
#include "ir/scalar_def.h"

namespace stepjit::codegen {

// The dtype an elementwise node computes in: its output's, or for a
// comparison (bool output) the promoted dtype of its inputs, as dispatch
// converts operands before the eager kernel runs.
inline ir::DType ComputeDType(const ir::Node& n) {
  const ir::DType out = n.output()->type().dtype;
  if (out != ir::DType::kBool) return out;
  ir::DType compute = n.inputs()[0]->type().dtype;
  for (const ir::Value* v : n.inputs()) {
    compute = ir::ResultType(std::vector<ir::TensorType>{{compute, {1}}, v->type()});
  }
  return compute;
}

// Applies the scalar definition of `n`'s op with backend `m`. `in(k)` gives
// operand k converted to the compute dtype; in-place updates read their
// optional operands as 0 and alpha/value from the attributes. nullopt when
// the op has no scalar definition.
template <class Math, class In>
std::optional<typename Math::V> ApplyScalarDef(Math& m, const ir::Node& n, In&& in) {
  using ir::AttrKey;
  using ir::OpId;
  switch (n.op()) {
#define SJ_UNARY(e, expr) \
  case OpId::k##e:        \
    return ir::ScalarDef<OpId::k##e>::Apply(m, in(0));
#define SJ_BINARY(e, expr) \
  case OpId::k##e:         \
    return ir::ScalarDef<OpId::k##e>::Apply(m, in(0), in(1));
#define SJ_UPDATE(e, expr)                                                                   \
  case OpId::k##e:                                                                           \
    return ir::ScalarDef<OpId::k##e>::Apply(                                                 \
        m, in(0), n.inputs().size() > 1 ? in(1) : m.Const(0),                                \
        n.inputs().size() > 2 ? in(2) : m.Const(0),                                          \
        m.Const(n.attrs().GetDouble(AttrKey::kAlpha, 1.0)),                                  \
        m.Const(n.attrs().GetDouble(AttrKey::kValue, 0.0)));
    SJ_UNARY_SCALAR_DEFS(SJ_UNARY)
    SJ_BINARY_SCALAR_DEFS(SJ_BINARY)
    SJ_COMPARE_SCALAR_DEFS(SJ_BINARY)
    SJ_UPDATE_SCALAR_DEFS(SJ_UPDATE)
#undef SJ_UNARY
#undef SJ_BINARY
#undef SJ_UPDATE
    default:
      return std::nullopt;
  }
}

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_SCALAR_OP_H_
