// Writes Graphs as Graphviz dot text (ir/dot.h).
#include "ir/dot.h"

#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/printer.h"

namespace stepjit::ir {
namespace {

// Attributes that fit on one line of this many characters share it; longer
// lists take a line per attribute, each value cut at kMaxAttrValue (a `cat`
// of hundreds of operands or a long shape list would widen the box past the
// picture).
constexpr size_t kMaxAttrLine = 48;
constexpr size_t kMaxAttrValue = 40;

// Node styles (shape, fill, extra attributes), one per kind of box.
constexpr const char* kInputStyle =
    "shape=invhouse, style=filled, fillcolor=\"#dae8fc\"";
constexpr const char* kStateStyle =
    "shape=cylinder, style=filled, fillcolor=\"#fff2cc\"";
constexpr const char* kRegionParamStyle =
    "shape=ellipse, style=filled, fillcolor=white, fontsize=8, height=0.3";
constexpr const char* kOpStyle =
    "shape=box, style=\"rounded,filled\", fillcolor=\"#f5f5f5\"";
constexpr const char* kGemmStyle =
    "shape=box3d, style=\"filled,bold\", fillcolor=\"#f8cecc\", "
    "color=\"#b85450\", penwidth=2";
constexpr const char* kWriteStyle =
    "shape=hexagon, style=\"filled,bold\", fillcolor=\"#ffcc99\", "
    "color=\"#d79b00\", penwidth=2";
constexpr const char* kReturnStyle =
    "shape=house, style=filled, fillcolor=\"#d5e8d4\"";

std::string TypesOf(const std::vector<Value*>& values) {
  if (values.size() == 1) return PrintType(values[0]->type());
  return absl::StrCat("(",
                      absl::StrJoin(values, ", ",
                                    [](std::string* out, const Value* v) {
                                      out->append(PrintType(v->type()));
                                    }),
                      ")");
}

// "{transpose_b = true}", or one "key = value" per line when they do not fit.
std::string AttrLines(const Attrs& attrs) {
  std::vector<std::string> items;
  for (const auto& [key, value] : attrs.items()) {
    std::string text = PrintAttrValue(value);
    if (text.size() > kMaxAttrValue)
      text = text.substr(0, kMaxAttrValue) + "...";
    items.push_back(absl::StrCat(AttrKeyName(key), " = ", text));
  }
  const std::string line = absl::StrCat("{", absl::StrJoin(items, ", "), "}");
  if (line.size() <= kMaxAttrLine) return line;
  return absl::StrCat("{", absl::StrJoin(items, ",\n"), "}");
}

const char* StyleOf(const Node& node) {
  if (node.kind() == NodeKind::kAssign) return kWriteStyle;
  if (GetOpInfo(node.op()).kind == OpKind::kMatmul) return kGemmStyle;
  if (IsInplace(node.op())) return kWriteStyle;
  return kOpStyle;
}

class DotWriter {
 public:
  explicit DotWriter(std::ostream& os) : os_(os) {}

  void WriteTop(const Graph& graph) {
    os_ << "digraph " << DotQuote(absl::StrCat("@", graph.name())) << " {\n"
        << "  graph [fontname=\"Helvetica\", fontsize=11, labelloc=t, "
           "label="
        << DotQuote(absl::StrCat("graph @", graph.name())) << "];\n"
        << "  node [fontname=\"Helvetica\", fontsize=10];\n"
        << "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n";
    for (size_t i = 0; i < graph.params().size(); ++i) {
      const Value* p = graph.params()[i];
      const bool state = graph.param_kind(p) == ParamKind::kState;
      const std::string id = absl::StrCat("p", i);
      WriteNode(id,
                absl::StrCat("%", p->name(), "\n", PrintType(p->type()), "\n",
                             ParamKindName(graph.param_kind(p))),
                state ? kStateStyle : kInputStyle, 2);
      ids_[p] = id;
    }
    WriteBody(graph, "n", 2);
    WriteNode("ret",
              absl::StrCat("return\n", graph.returns().size(), " value",
                           graph.returns().size() == 1 ? "" : "s"),
              kReturnStyle, 2);
    for (const Value* v : graph.returns()) WriteEdge(v, "ret", 2, "");
    os_ << "}\n";
  }

 private:
  // The nodes of `graph`, with ids `prefix`<k>, and their uses.
  void WriteBody(const Graph& graph, const std::string& prefix, int indent) {
    const ValueNames names(graph);
    for (size_t k = 0; k < graph.nodes().size(); ++k) {
      const Node& node = *graph.nodes()[k];
      const std::string id = absl::StrCat(prefix, k);
      if (node.kind() == NodeKind::kFusion) {
        WriteRegion(node, names, id, indent);
        continue;
      }
      std::string label = PrintNodeHeaderShort(node, names);
      if (node.kind() == NodeKind::kOp) {
        if (!node.attrs().items().empty()) {
          absl::StrAppend(&label, "\n", AttrLines(node.attrs()));
        }
        absl::StrAppend(&label, "\n", TypesOf(node.outputs()));
      }
      WriteNode(id, label, StyleOf(node), indent);
      for (size_t i = 0; i < node.inputs().size(); ++i) {
        // An assign's first input is the state parameter it writes.
        const bool written = node.kind() == NodeKind::kAssign && i == 0;
        WriteEdge(node.inputs()[i], id, indent,
                  written ? "style=dashed, color=\"#d79b00\"" : "");
      }
      for (const Value* out : node.outputs()) ids_[out] = id;
    }
  }

  // A fusion node: a cluster with one node per region input and the body's
  // nodes; its results are drawn from the body nodes that compute them.
  void WriteRegion(const Node& node, const ValueNames& names,
                   const std::string& id, int indent) {
    const std::string pad(indent, ' ');
    const Graph& body = *node.body();
    os_ << pad << "subgraph " << DotQuote(absl::StrCat("cluster_", id))
        << " {\n"
        << pad << "  label="
        << DotQuote(absl::StrCat("%", names.NodeNumber(&node), " = fusion @",
                                 body.name()))
        << ";\n"
        << pad
        << "  style=\"rounded,filled\"; fillcolor=\"#eef4fb\"; "
           "color=\"#6c8ebf\";\n";
    for (size_t i = 0; i < body.params().size(); ++i) {
      const Value* p = body.params()[i];
      const std::string param_id = absl::StrCat(id, "_p", i);
      WriteNode(param_id, absl::StrCat("%", p->name()), kRegionParamStyle,
                indent + 2);
      ids_[p] = param_id;
    }
    WriteBody(body, id + "_", indent + 2);
    os_ << pad << "}\n";
    // Outside the cluster: an edge written inside it would pull the outer
    // producer into the cluster too.
    for (size_t i = 0; i < body.params().size() && i < node.inputs().size();
         ++i) {
      WriteEdge(node.inputs()[i], absl::StrCat(id, "_p", i), indent, "");
    }
    for (size_t i = 0; i < node.outputs().size() && i < body.returns().size();
         ++i) {
      ids_[node.outputs()[i]] = IdOf(body.returns()[i]);
    }
  }

  // The header without the input list (the edges show the inputs): "%3 =
  // exp", "assign %w".
  static std::string PrintNodeHeaderShort(const Node& node,
                                          const ValueNames& names) {
    if (node.kind() == NodeKind::kAssign) {
      return absl::StrCat("assign ", node.inputs().empty()
                                         ? std::string("?")
                                         : names.Name(node.inputs()[0]));
    }
    return absl::StrCat("%", names.NodeNumber(&node), " = ", OpName(node.op()));
  }

  void WriteNode(const std::string& id, const std::string& label,
                 const char* style, int indent) {
    os_ << std::string(indent, ' ') << id << " [label=" << DotQuote(label)
        << ", " << style << "];\n";
  }

  // One use of `v` by the node `to`.
  void WriteEdge(const Value* v, const std::string& to, int indent,
                 const char* extra) {
    const std::string from = IdOf(v);  // may write a node first
    os_ << std::string(indent, ' ') << from << " -> " << to
        << " [label=" << DotQuote(PrintType(v->type()));
    if (*extra != '\0') os_ << ", " << extra;
    os_ << "];\n";
  }

  // A value the graph does not define (the verifier rejects such graphs, but
  // a picture of one is still drawn) comes from a node of its own.
  std::string IdOf(const Value* v) {
    auto it = ids_.find(v);
    if (it != ids_.end()) return it->second;
    const std::string id = absl::StrCat("undefined", undefined_++);
    WriteNode(id, "undefined value", "shape=octagon, color=red", 2);
    ids_[v] = id;
    return id;
  }

  std::ostream& os_;
  absl::flat_hash_map<const Value*, std::string> ids_;
  int undefined_ = 0;
};

}  // namespace

std::string DotQuote(absl::string_view text) {
  return Quote(text, [](std::string& out, unsigned char c) {
    out += c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c);
  });
}

std::string PrintDot(const Graph& graph) {
  std::ostringstream os;
  PrintDot(graph, os);
  return os.str();
}

void PrintDot(const Graph& graph, std::ostream& os) {
  DotWriter(os).WriteTop(graph);
}

}  // namespace stepjit::ir
