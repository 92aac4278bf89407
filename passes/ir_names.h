// The ir names that the passes use unqualified, brought into stepjit::passes
// (and so into its nested namespaces) once here.
#ifndef STEPJIT_PASSES_IR_NAMES_H_
#define STEPJIT_PASSES_IR_NAMES_H_

#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/infer.h"
#include "ir/op.h"

namespace stepjit::passes {

using ir::AttrKey;
using ir::DType;
using ir::Node;
using ir::NodeKind;
using ir::OpId;
using ir::TensorType;
using ir::Value;

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_IR_NAMES_H_
