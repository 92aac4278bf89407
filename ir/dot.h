// Graphviz (dot) pictures of a Graph: one box per node, one edge per use.
//
// The picture shows what the text form (ir/printer.h) says, laid out:
//   * a graph parameter is a node of its own: an input as an inverted house
//     (blue), a state parameter as a cylinder (yellow);
//   * an op is a rounded box labelled with its printed header ("%3 = exp"),
//     its attributes and its result type(s); a GEMM (kind kMatmul) is a red
//     3-D box; an in-place update (flag kInplace: the optimizer's add_,
//     lerp_, ...) is an orange hexagon, as is `assign`, the write-back of a
//     state parameter;
//   * a fusion node is a `subgraph cluster_<id>` holding its body: the body's
//     parameters (small ellipses, one per region input) and its ops. A use of
//     a fusion result is drawn from the body node that computes it;
//   * the graph's return list is one green node `return`.
// Every use of a value (each input of a node, in any region, and each
// returned value) is one edge, from the value's producer, labelled with the
// value's type ("f32[128,512]"). An assign's edge from the state parameter
// it writes is dashed and orange.
//
// Node ids are stable across runs: p<i> for parameter i, n<k> for node k,
// n<k>_p<i> and n<k>_<j> inside node k's region, `ret` for the return list.
// Labels are escaped (DotQuote), so any graph name or string attribute gives
// valid dot text. `dot -Tsvg` renders it (docs/pictures.md).
#ifndef STEPJIT_IR_DOT_H_
#define STEPJIT_IR_DOT_H_

#include <ostream>
#include <string>

#include "absl/strings/string_view.h"
#include "ir/graph.h"

namespace stepjit::ir {

std::string PrintDot(const Graph& graph);
void PrintDot(const Graph& graph, std::ostream& os);

// `text` as a dot double-quoted string that shows it literally: quotes and
// backslashes escaped, a newline as a centered line break, other control
// characters as '?'.
std::string DotQuote(absl::string_view text);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_DOT_H_
