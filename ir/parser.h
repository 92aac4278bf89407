// Parses the IR text form (see ir/printer.h) back into a Graph.
#ifndef STEPJIT_IR_PARSER_H_
#define STEPJIT_IR_PARSER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/graph.h"

namespace stepjit::ir {

// Parses one `graph @name(...) { ... }`. Node results may carry any name in
// the text (`%h = relu %x ...`); printing renumbers them. Declared result
// types are taken as written: run Verify to check them against inference.
// Errors are InvalidArgument with the message
// "<filename>:<line>:<col>: error: expected ..., found ...".
absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(
    absl::string_view text, absl::string_view filename = "<input>");

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_PARSER_H_
