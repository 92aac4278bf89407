// The ir names that the code generators use unqualified, brought into
// stepjit::codegen (and so into its cpu and cuda namespaces) once here.
#ifndef STEPJIT_CODEGEN_IR_NAMES_H_
#define STEPJIT_CODEGEN_IR_NAMES_H_

#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/op.h"

namespace stepjit::codegen {

using ir::AttrKey;
using ir::DType;
using ir::Node;
using ir::OpId;
using ir::Value;

}  // namespace stepjit::codegen

#endif  // STEPJIT_CODEGEN_IR_NAMES_H_
