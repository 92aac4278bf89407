// Trace records: node comparison that ignores random seeds and offsets,
// user-facing diffs, and the graph a record describes.
#include "frontend/trace_record.h"

#include "absl/strings/str_cat.h"
#include "ir/printer.h"

namespace stepjit::frontend {
namespace {

using ir::AttrKey;

bool IsDrawKey(AttrKey key) {
  return key == AttrKey::kSeed || key == AttrKey::kOffset;
}

// Attributes equal, leaving out a random op's seed and offset (its draw is
// compared separately).
bool SameAttrs(const ir::Attrs& a, const ir::Attrs& b, bool random) {
  if (!random) return a == b;
  const auto& x = a.items();
  const auto& y = b.items();
  size_t i = 0, j = 0;
  while (true) {
    while (i < x.size() && IsDrawKey(x[i].first)) ++i;
    while (j < y.size() && IsDrawKey(y[j].first)) ++j;
    if (i == x.size() || j == y.size()) return i == x.size() && j == y.size();
    if (!(x[i] == y[j])) return false;
    ++i;
    ++j;
  }
}

std::string NodeName(const TraceRecord::Node& n, size_t index) {
  if (n.kind == ir::NodeKind::kAssign)
    return absl::StrCat("write-back #", index);
  return absl::StrCat("op #", index, " (", ir::OpName(n.op), " -> ",
                      ir::PrintType(n.type), ")");
}

std::string AttrText(const ir::Attrs& attrs, AttrKey key) {
  const ir::AttrValue* v = attrs.Find(key);
  return v == nullptr
             ? std::string("unset")
             : absl::StrCat(ir::AttrKeyName(key), "=", ir::PrintAttrValue(*v));
}

// The first attribute whose value differs between `a` and `b`.
std::string DiffAttrs(const ir::Attrs& a, const ir::Attrs& b, bool random) {
  for (const auto& [key, value] : a.items()) {
    if (random && IsDrawKey(key)) continue;
    const ir::AttrValue* other = b.Find(key);
    if (other == nullptr || !(*other == value)) {
      return absl::StrCat(AttrText(b, key), " now, traced with ",
                          AttrText(a, key));
    }
  }
  for (const auto& [key, value] : b.items()) {
    if (random && IsDrawKey(key)) continue;
    if (!a.Has(key))
      return absl::StrCat(AttrText(b, key), " now, traced without it");
  }
  return "";
}

std::string ParamText(const TraceRecord::Param& p) {
  return absl::StrCat(ir::PrintType(p.type),
                      p.kind == ir::ParamKind::kState ? " state" : " input");
}

}  // namespace

bool SameNode(const TraceRecord::Node& a, ir::NodeKind kind, ir::OpId op,
              absl::Span<const int> inputs, const ir::Attrs& attrs,
              const ir::TensorType& type, int random_draw) {
  if (a.kind != kind || a.random_draw != random_draw ||
      absl::MakeConstSpan(a.inputs) != inputs)
    return false;
  if (kind == ir::NodeKind::kAssign) return true;
  return a.op == op && a.type == type &&
         SameAttrs(a.attrs, attrs, random_draw >= 0);
}

std::string DiffTraces(const TraceRecord& traced, const TraceRecord& now) {
  const size_t params = std::min(traced.params.size(), now.params.size());
  for (size_t i = 0; i < params; ++i) {
    const TraceRecord::Param& a = traced.params[i];
    const TraceRecord::Param& b = now.params[i];
    if (a.kind != b.kind || !(a.type == b.type)) {
      return absl::StrCat("graph parameter ", i, " is ", ParamText(b),
                          " now, traced as ", ParamText(a),
                          ": the step reads different tensors from outside");
    }
    if (a.state != b.state) {
      return absl::StrCat(
          "the step reads a different ", ir::PrintType(b.type),
          " tensor from outside than when it was traced (graph parameter ", i,
          "): a tensor the step captures was rebound; pass it as an argument, "
          "or update it in place (copy_, fill_) instead of assigning a new "
          "tensor");
    }
  }
  const size_t nodes = std::min(traced.nodes.size(), now.nodes.size());
  for (size_t i = 0; i < nodes; ++i) {
    const TraceRecord::Node& a = traced.nodes[i];
    const TraceRecord::Node& b = now.nodes[i];
    if (SameNode(a, b.kind, b.op, b.inputs, b.attrs, b.type, b.random_draw))
      continue;
    if (a.kind != b.kind || a.op != b.op) {
      return absl::StrCat(
          NodeName(b, i), " is where the traced step had ", NodeName(a, i),
          ": the step takes a different path now (a host value or flag it "
          "reads changed)");
    }
    if (a.inputs != b.inputs) {
      return absl::StrCat(NodeName(b, i),
                          " reads different operands than when traced");
    }
    if (const std::string attrs = DiffAttrs(a.attrs, b.attrs, a.random_draw >= 0);
        !attrs.empty()) {
      return absl::StrCat(
          NodeName(b, i), " has ", attrs,
          ": a host number entered the graph as a constant (a captured double, "
          "or a setter such as opt.set_lr() called inside the step); make it a "
          "0-d tensor updated outside the step (fill_) so that a change needs "
          "no retrace");
    }
    if (!(a.type == b.type)) {
      return absl::StrCat(NodeName(b, i), " gives ", ir::PrintType(b.type),
                          " now, traced as ", ir::PrintType(a.type));
    }
    return absl::StrCat(NodeName(b, i),
                        " shares a random draw with a different op than when "
                        "traced");
  }
  if (traced.params.size() != now.params.size()) {
    return absl::StrCat("the step reads ", now.params.size(),
                        " graph parameters now, traced with ",
                        traced.params.size());
  }
  if (traced.nodes.size() != now.nodes.size()) {
    return absl::StrCat("the step records ", now.nodes.size(),
                        " ops now, traced with ", traced.nodes.size(),
                        ": it takes a different path (a host value or "
                        "flag it reads changed)");
  }
  if (traced.returns != now.returns || traced.num_outputs != now.num_outputs) {
    return "the step returns different values than when traced";
  }
  if (traced.grad_bindings != now.grad_bindings) {
    return "the step leaves different .grad bindings than when traced";
  }
  return "";
}

std::unique_ptr<ir::Graph> BuildGraph(const TraceRecord& record,
                                      const std::string& name,
                                      absl::Span<const int> extra_returns,
                                      bool write_back) {
  auto graph = std::make_unique<ir::Graph>(name);
  std::vector<ir::Value*> params;
  params.reserve(record.params.size());
  int inputs = 0, states = 0;
  for (const TraceRecord::Param& p : record.params) {
    const bool state = p.kind == ir::ParamKind::kState;
    params.push_back(graph->AddParam(
        absl::StrCat(state ? "s" : "x", state ? states++ : inputs++), p.type,
        p.kind));
  }
  std::vector<ir::Value*> results(record.nodes.size(), nullptr);
  auto value = [&](int id) {
    return id < 0 ? params[-id - 1] : results[static_cast<size_t>(id)];
  };
  for (size_t i = 0; i < record.nodes.size(); ++i) {
    const TraceRecord::Node& n = record.nodes[i];
    if (n.kind == ir::NodeKind::kAssign) {
      if (write_back) graph->AddAssign(value(n.inputs[0]), value(n.inputs[1]));
      continue;
    }
    std::vector<ir::Value*> in;
    in.reserve(n.inputs.size());
    for (int id : n.inputs) in.push_back(value(id));
    results[i] = graph->AddOp(n.op, std::move(in), n.attrs, n.type)->output();
  }
  std::vector<ir::Value*> returns;
  for (int id : record.returns) returns.push_back(value(id));
  for (int id : extra_returns) returns.push_back(value(id));
  graph->SetReturns(std::move(returns));
  return graph;
}

}  // namespace stepjit::frontend
