// Checks canonicalize's constant folding bit for bit against eager kernels.
//
// For every elementwise op, dtype combination and a grid of values, a graph
// `op(full a, full b)` is canonicalized; the folded `full` is materialized by
// eager (as the executor would) and its bytes must equal eager's own result
// of the op. Folding may decline only where eager's result is NaN or the
// value grid would make eager undefined (never here).
#include "passes/canonicalize.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/infer.h"
#include "ir/printer.h"
#include "ir/scalar_def.h"
#include "runtime/dispatch.h"
#include "runtime/tensor.h"

namespace stepjit::passes {
namespace {

using ir::AttrKey;
using ir::DType;
using ir::OpId;

constexpr DType kDTypes[] = {DType::kF32,  DType::kF64, DType::kF16,
                             DType::kBF16, DType::kI64, DType::kI32,
                             DType::kBool};

// Values eager holds without undefined behaviour in each dtype.
std::vector<double> Values(DType dtype) {
  if (dtype == DType::kBool) return {0, 1};
  if (ir::IsIntegral(dtype)) return {0, 1, -1, 3, -7, 100, 2147483647.0};
  return {0.0,  -0.0,    1.0,  -1.0,     0.1,       2.5, -7.25,
          1e-8, 70000.0, 1e30, INFINITY, -INFINITY, NAN};
}

std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()), t.element_size());
}

struct Operand {
  DType dtype;
  double value;
};

// Folds op(operands) through canonicalize. Returns false when the graph is
// not well typed; sets `folded` to the materialized result or leaves it
// undefined when canonicalize declined.
bool FoldThroughPass(OpId op, const std::vector<Operand>& operands,
                     const ir::Attrs& attrs, Tensor& folded) {
  ir::Graph graph("g");
  std::vector<ir::Value*> inputs;
  std::vector<ir::TensorType> types;
  for (const Operand& o : operands) {
    ir::TensorType type;
    type.dtype = o.dtype;
    ir::Node* full = graph.AddOp(OpId::kFull, {},
                                 {{AttrKey::kShape, std::vector<int64_t>{}},
                                  {AttrKey::kValue, o.value},
                                  {AttrKey::kDTypeAttr, o.dtype}},
                                 type);
    inputs.push_back(full->output());
    types.push_back(type);
  }
  absl::StatusOr<ir::TensorType> out = ir::InferType(op, types, attrs);
  if (!out.ok()) return false;
  ir::Node* node = graph.AddOp(op, inputs, attrs, *out);
  graph.SetReturns({node->output()});
  PassStats stats;
  EXPECT_TRUE(Canonicalize(graph, stats).ok());
  const ir::Node* result = graph.returns()[0]->producer();
  if (result->op() == OpId::kFull) {
    folded = runtime::Dispatch(OpId::kFull, {}, result->attrs());
  }
  return true;
}

// Returns whether the case folded (so tests can tell they compared something).
bool CheckOne(OpId op, const std::vector<Operand>& operands,
              const ir::Attrs& attrs = {}) {
  Tensor folded;
  if (!FoldThroughPass(op, operands, attrs, folded)) return false;
  std::vector<Tensor> inputs;
  std::string where = absl::StrCat(ir::OpName(op), "(");
  for (const Operand& o : operands) {
    absl::StrAppend(&where, inputs.empty() ? "" : ", ", ir::DTypeName(o.dtype),
                    " ", o.value);
    inputs.push_back(full({}, o.value, {.dtype = o.dtype}));
  }
  const Tensor eager = runtime::Dispatch(op, inputs, attrs);
  if (!folded.defined()) {
    // Declining is right for NaN and for integers a double `value` cannot hold.
    const double e = eager.item();
    EXPECT_TRUE(std::isnan(e) || std::fabs(e) > 9007199254740992.0)
        << where << "): not folded, eager " << e;
    return false;
  }
  if (folded.dtype() != eager.dtype()) {
    ADD_FAILURE() << where << "): folded to " << ir::DTypeName(folded.dtype());
    return false;
  }
  EXPECT_EQ(Bytes(folded), Bytes(eager))
      << where << "): folded " << folded.item() << ", eager " << eager.item();
  return true;
}

TEST(CanonicalizeFoldTest, UnaryOpsMatchEagerBitForBit) {
  const OpId ops[] = {
#define SJ_OP(e, expr) OpId::k##e,
      SJ_UNARY_SCALAR_DEFS(SJ_OP)
#undef SJ_OP
  };
  int folded = 0;
  for (OpId op : ops) {
    for (DType dtype : kDTypes) {
      for (double v : Values(dtype)) folded += CheckOne(op, {{dtype, v}});
    }
  }
  EXPECT_GT(folded, 900);
}

TEST(CanonicalizeFoldTest, BinaryAndCompareOpsMatchEagerBitForBit) {
  const OpId ops[] = {
#define SJ_OP(e, expr) OpId::k##e,
      SJ_BINARY_SCALAR_DEFS(SJ_OP) SJ_COMPARE_SCALAR_DEFS(SJ_OP)
#undef SJ_OP
  };
  int folded = 0;
  for (OpId op : ops) {
    for (DType da : kDTypes) {
      for (DType db : kDTypes) {
        for (double a : Values(da)) {
          for (double b : Values(db))
            folded += CheckOne(op, {{da, a}, {db, b}});
        }
      }
    }
  }
  EXPECT_GT(folded, 55000);
}

TEST(CanonicalizeFoldTest, CastsAndWhereMatchEagerBitForBit) {
  int folded = 0;
  for (DType from : kDTypes) {
    for (DType to : kDTypes) {
      // Eager's float -> integer conversion of inf/NaN/huge values is
      // undefined, so those are not compared.
      const bool to_int = ir::IsFloating(from) && ir::IsIntegral(to);
      for (double v : to_int ? std::vector<double>{0, -0.0, 1, -7.25, 100.5}
                             : Values(from)) {
        folded +=
            CheckOne(OpId::kCast, {{from, v}}, {{AttrKey::kDTypeAttr, to}});
      }
    }
  }
  for (DType dx : kDTypes) {
    for (DType dy : kDTypes) {
      for (double c : {0.0, 1.0}) {
        folded +=
            CheckOne(OpId::kWhere, {{DType::kBool, c}, {dx, 1.0}, {dy, -2.5}});
      }
    }
  }
  EXPECT_GT(folded, 450);
}

}  // namespace
}  // namespace stepjit::passes
