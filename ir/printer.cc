// Prints Graphs in the IR text form documented in ir/printer.h.
#include "ir/printer.h"

#include <charconv>
#include <cmath>
#include <sstream>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"

namespace stepjit::ir {
namespace {

// Shortest text that parses back to the same bits, never mistakable for an
// integer: std::to_chars gives the shortest round-trip form.
std::string FormatDouble(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d);
  SJ_CHECK(ec == std::errc());
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string QuoteString(const std::string& s) {
  return Quote(s, [](std::string& out, unsigned char c) {
    if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c >= 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  });
}

std::string JoinNames(const std::vector<Value*>& values,
                      const ValueNames& names) {
  return absl::StrJoin(values, ", ", [&](std::string* out, const Value* v) {
    out->append(names.Name(v));
  });
}

std::string JoinTypes(const std::vector<Value*>& values) {
  return absl::StrJoin(values, ", ", [](std::string* out, const Value* v) {
    out->append(PrintType(v->type()));
  });
}

void PrintGraph(const Graph& graph, std::ostream& os, int indent);

void PrintNode(const Node& node, const ValueNames& names, std::ostream& os,
               int indent) {
  const std::string pad(indent, ' ');
  os << pad << PrintNodeHeader(node, names);
  switch (node.kind()) {
    case NodeKind::kOp: {
      if (!node.attrs().items().empty()) {
        os << " {"
           << absl::StrJoin(node.attrs().items(), ", ",
                            [](std::string* out, const auto& item) {
                              absl::StrAppend(out, AttrKeyName(item.first),
                                              " = ",
                                              PrintAttrValue(item.second));
                            })
           << "}";
      }
      if (node.outputs().size() == 1) {
        os << " : " << PrintType(node.output()->type()) << "\n";
      } else {
        os << " : (" << JoinTypes(node.outputs()) << ")\n";
      }
      break;
    }
    case NodeKind::kFusion:
      os << " : (" << JoinTypes(node.outputs()) << ") {\n";
      PrintGraph(*node.body(), os, indent + 2);
      os << pad << "}\n";
      break;
    case NodeKind::kAssign:
      os << "\n";
      break;
  }
}

void PrintGraph(const Graph& graph, std::ostream& os, int indent) {
  const ValueNames names(graph);
  const std::string pad(indent, ' ');
  os << pad << "graph @" << graph.name() << "(";
  for (size_t i = 0; i < graph.params().size(); ++i) {
    const Value* p = graph.params()[i];
    os << (i == 0 ? "" : ", ") << "%" << p->name() << ": "
       << PrintType(p->type()) << " " << ParamKindName(graph.param_kind(p));
  }
  os << ") {\n";
  for (const auto& node : graph.nodes()) {
    PrintNode(*node, names, os, indent + 2);
  }
  os << pad << "  return";
  if (!graph.returns().empty()) os << " " << JoinNames(graph.returns(), names);
  os << "\n" << pad << "}\n";
}

}  // namespace

std::string Quote(
    absl::string_view text,
    absl::FunctionRef<void(std::string& out, unsigned char c)> append_other) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        append_other(out, c);
    }
  }
  return out + "\"";
}

ValueNames::ValueNames(const Graph& graph) {
  for (const Value* p : graph.params()) {
    entries_[p] = {absl::StrCat("%", p->name()), -1};
  }
  int number = 0;
  for (size_t pos = 0; pos < graph.nodes().size(); ++pos) {
    const Node& node = *graph.nodes()[pos];
    const int position = static_cast<int>(pos);
    switch (node.kind()) {
      case NodeKind::kOp:
      case NodeKind::kFusion:
        // A single op result is plain `%N`; a fusion's always indexed.
        for (size_t i = 0; i < node.outputs().size(); ++i) {
          entries_[node.outputs()[i]] = {
              node.kind() == NodeKind::kOp && node.outputs().size() == 1
                  ? absl::StrCat("%", number)
                  : absl::StrCat("%", number, "#", i),
              position};
        }
        numbers_[&node] = number++;
        break;
      case NodeKind::kAssign:
        break;
    }
  }
}

std::optional<std::string> ValueNames::Find(const Value* v) const {
  auto it = entries_.find(v);
  if (it == entries_.end()) return std::nullopt;
  return it->second.name;
}

std::string ValueNames::Name(const Value* v) const {
  return Find(v).value_or("%?");
}

std::optional<int> ValueNames::DefinedAt(const Value* v) const {
  auto it = entries_.find(v);
  if (it == entries_.end()) return std::nullopt;
  return it->second.position;
}

int ValueNames::NodeNumber(const Node* node) const {
  auto it = numbers_.find(node);
  return it == numbers_.end() ? -1 : it->second;
}

std::string PrintType(const TensorType& type) {
  return absl::StrCat(DTypeName(type.dtype), "[",
                      absl::StrJoin(type.shape, ","), "]");
}

std::string PrintAttrValue(const AttrValue& value) {
  struct Visitor {
    std::string operator()(int64_t i) const { return absl::StrCat(i); }
    std::string operator()(double d) const { return FormatDouble(d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::vector<int64_t>& l) const {
      return absl::StrCat("[", absl::StrJoin(l, ", "), "]");
    }
    std::string operator()(DType t) const { return std::string(DTypeName(t)); }
    std::string operator()(const std::string& s) const {
      return QuoteString(s);
    }
  };
  return std::visit(Visitor{}, value);
}

std::string PrintNodeHeader(const Node& node, const ValueNames& names) {
  switch (node.kind()) {
    case NodeKind::kOp: {
      std::string s =
          absl::StrCat("%", names.NodeNumber(&node), " = ", OpName(node.op()));
      if (!node.inputs().empty()) {
        absl::StrAppend(&s, " ", JoinNames(node.inputs(), names));
      }
      return s;
    }
    case NodeKind::kFusion:
      return absl::StrCat("%", names.NodeNumber(&node), " = fusion @",
                          node.body()->name(), "(",
                          JoinNames(node.inputs(), names), ")");
    case NodeKind::kAssign:
      return absl::StrCat("assign ", JoinNames(node.inputs(), names));
  }
  return "";
}

std::string Print(const Graph& graph) {
  std::ostringstream os;
  Print(graph, os);
  return os.str();
}

void Print(const Graph& graph, std::ostream& os) { PrintGraph(graph, os, 0); }

}  // namespace stepjit::ir
