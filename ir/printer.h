// The IR text form: printing a Graph, and the value naming the verifier shares.
//
//   graph @step(%x: f32[128,784] input, %w: f32[512,784] state) {
//     %0 = matmul %x, %w {transpose_b = true} : f32[128,512]
//     %1 = fusion @fused_0(%0, %w) : (f32[128,512], f32[512,784]) {
//       graph @fused_0(%p0: f32[128,512] input, %p1: f32[512,784] input) {
//         %0 = relu %p0 : f32[128,512]
//         return %0, %p1
//       }
//     }
//     assign %w, %1#1
//     return %1#0
//   }
//
// Parameters print by name; node results are numbered %0, %1, ... in program
// order at print time (a fusion, or an op with several results, takes one
// number and its results are %N#i, their types listed in parentheses:
// `%3 = matmul %dy, %x {...} : (f32[512,784], f32[512])`), so the text never
// depends on creation order. Attributes print in stored order;
// doubles always carry '.', 'e', inf or nan and parse back bit-identically.
// ir/parser.h reads this form; Print(Parse(Print(g))) == Print(g).
#ifndef STEPJIT_IR_PRINTER_H_
#define STEPJIT_IR_PRINTER_H_

#include <optional>
#include <ostream>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "ir/attrs.h"
#include "ir/graph.h"

namespace stepjit::ir {

// The printed names of one graph's values (not of its fusion bodies'). The
// verifier uses it so that its messages name values exactly as the text does.
class ValueNames {
 public:
  explicit ValueNames(const Graph& graph);

  // "%x", "%3" or "%2#1"; nullopt when `v` is not defined in this graph.
  std::optional<std::string> Find(const Value* v) const;
  // As Find, but "%?" for a value this graph does not define.
  std::string Name(const Value* v) const;
  // Index in graph.nodes() of the node defining `v`, -1 for a parameter,
  // nullopt when this graph does not define `v`.
  std::optional<int> DefinedAt(const Value* v) const;
  // The number a node of this graph prints with (`%N = ...`); -1 for assign.
  int NodeNumber(const Node* node) const;

 private:
  struct Entry {
    std::string name;
    int position;
  };
  absl::flat_hash_map<const Value*, Entry> entries_;
  absl::flat_hash_map<const Node*, int> numbers_;
};

// "f32[128,784]", "f32[]".
std::string PrintType(const TensorType& type);
// `text` in double quotes, its '"', '\\' and newlines backslash-escaped;
// every other byte goes through `append_other`, which writes it as the
// format wants (the IR escapes the other control bytes, dot labels replace
// them).
std::string Quote(
    absl::string_view text,
    absl::FunctionRef<void(std::string& out, unsigned char c)> append_other);
// One attribute value as it appears after `key = `.
std::string PrintAttrValue(const AttrValue& value);
// A node without attributes, types or body: "%5 = add %3, %4",
// "%2 = fusion @fused_0(%0, %w0)", "assign %w0, %9#3".
std::string PrintNodeHeader(const Node& node, const ValueNames& names);

std::string Print(const Graph& graph);
void Print(const Graph& graph, std::ostream& os);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_PRINTER_H_
