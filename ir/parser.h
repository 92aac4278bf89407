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
// `first_line`: the line of the file `text` starts at (a piece of a larger
// file), so that messages give the file's line numbers. A fusion body may
// nest at most 64 deep.
absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(
    absl::string_view text, absl::string_view filename = "<input>",
    int first_line = 1);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_PARSER_H_
