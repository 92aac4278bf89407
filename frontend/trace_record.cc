// Trace records: node comparison that ignores random seeds and offsets,
// user-facing diffs, and the graph a record describes.
#include "frontend/trace_record.h"

#include "absl/strings/str_cat.h"
#include "ir/printer.h"

namespace stepjit::frontend {
namespace {

using ir::AttrKey;

// What a node's comparison leaves out of its attributes: a random op's
// seed and offset (its draw is compared separately), a lifted number's
// value.
enum class Skip { kNone, kDraw, kValue };
bool Skipped(AttrKey key, Skip skip) {
  return (skip == Skip::kDraw &&
          (key == AttrKey::kSeed || key == AttrKey::kOffset)) ||
         (skip == Skip::kValue && key == AttrKey::kValue);
}
Skip SkipOf(const TraceRecord::Node& n) {
  return n.random_draw >= 0 ? Skip::kDraw
         : n.lifted         ? Skip::kValue
                            : Skip::kNone;
}

bool SameAttrs(const ir::Attrs& a, const ir::Attrs& b, Skip skip) {
  if (skip == Skip::kNone) return a == b;
  const auto& x = a.items();
  const auto& y = b.items();
  size_t i = 0, j = 0;
  while (true) {
    while (i < x.size() && Skipped(x[i].first, skip)) ++i;
    while (j < y.size() && Skipped(y[j].first, skip)) ++j;
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
std::string DiffAttrs(const ir::Attrs& a, const ir::Attrs& b, Skip skip) {
  for (const auto& [key, value] : a.items()) {
    if (Skipped(key, skip)) continue;
    const ir::AttrValue* other = b.Find(key);
    if (other == nullptr || !(*other == value)) {
      return absl::StrCat(AttrText(b, key), " now, traced with ",
                          AttrText(a, key));
    }
  }
  for (const auto& [key, value] : b.items()) {
    if (Skipped(key, skip)) continue;
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

const TraceRecord::Routine* TraceRecord::RoutineAt(size_t begin) const {
  // Routines are recorded in the order they began.
  auto it =
      std::lower_bound(routines.begin(), routines.end(), begin,
                       [](const Routine& r, size_t b) { return r.begin < b; });
  return it != routines.end() && it->begin == begin ? &*it : nullptr;
}

void TraceRecord::IndexLifted() {
  for (Routine& r : routines) {
    r.lifted.clear();
    for (size_t n = r.begin; n < r.end && n < nodes.size(); ++n) {
      if (nodes[n].lifted) r.lifted.push_back(n);
    }
  }
}

bool IsLiftable(const TraceRecord::Node& n) {
  return n.kind == ir::NodeKind::kOp && n.op == ir::OpId::kFull &&
         n.type.shape.empty() && ir::IsFloating(n.type.dtype);
}

std::vector<size_t> ScalarOnlyDiff(const TraceRecord& traced,
                                   const TraceRecord& now) {
  if (traced.params != now.params || traced.nodes.size() != now.nodes.size() ||
      traced.returns != now.returns || traced.num_outputs != now.num_outputs ||
      traced.grad_bindings != now.grad_bindings)
    return {};
  std::vector<size_t> changed;
  for (size_t i = 0; i < now.nodes.size(); ++i) {
    const TraceRecord::Node& a = traced.nodes[i];
    const TraceRecord::Node& b = now.nodes[i];
    if (SameNode(a, b.kind, b.op, b.inputs, b.attrs, b.type, b.random_draw))
      continue;
    if (!IsLiftable(a) || a.lifted || b.kind != a.kind || b.op != a.op ||
        !(b.type == a.type) || !SameAttrs(a.attrs, b.attrs, Skip::kValue))
      return {};
    changed.push_back(i);
  }
  return changed;
}

bool SameUpToSizes(const TraceRecord& traced, const TraceRecord& now) {
  if (traced.params.size() != now.params.size() ||
      traced.nodes.size() != now.nodes.size() ||
      traced.returns != now.returns || traced.num_outputs != now.num_outputs ||
      traced.grad_bindings != now.grad_bindings)
    return false;
  auto same_kind = [](const ir::TensorType& a, const ir::TensorType& b) {
    return a.dtype == b.dtype && a.shape.size() == b.shape.size();
  };
  for (size_t i = 0; i < now.params.size(); ++i) {
    const TraceRecord::Param& a = traced.params[i];
    const TraceRecord::Param& b = now.params[i];
    if (a.kind != b.kind || a.state != b.state || !same_kind(a.type, b.type))
      return false;
  }
  for (size_t i = 0; i < now.nodes.size(); ++i) {
    const TraceRecord::Node& a = traced.nodes[i];
    const TraceRecord::Node& b = now.nodes[i];
    if (a.kind != b.kind || a.op != b.op || a.inputs != b.inputs ||
        a.random_draw != b.random_draw ||
        (a.kind == ir::NodeKind::kOp && !same_kind(a.type, b.type)))
      return false;
  }
  return true;
}

bool SameNode(const TraceRecord::Node& a, ir::NodeKind kind, ir::OpId op,
              absl::Span<const int> inputs, const ir::Attrs& attrs,
              const ir::TensorType& type, int random_draw) {
  if (a.kind != kind || a.random_draw != random_draw ||
      absl::MakeConstSpan(a.inputs) != inputs)
    return false;
  if (kind == ir::NodeKind::kAssign) return true;
  return a.op == op && a.type == type && SameAttrs(a.attrs, attrs, SkipOf(a));
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
    if (const std::string attrs = DiffAttrs(a.attrs, b.attrs, SkipOf(a));
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
                                      GraphOptions options) {
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
  int lifted = 0;
  if (options.lift) {
    for (size_t i = 0; i < record.nodes.size(); ++i) {
      const TraceRecord::Node& n = record.nodes[i];
      if (n.lifted) {
        results[i] = graph->AddParam(absl::StrCat("c", lifted++), n.type,
                                     ir::ParamKind::kInput);
      }
    }
  }
  auto value = [&](int id) {
    return id < 0 ? params[-id - 1] : results[static_cast<size_t>(id)];
  };
  // Random ops draw from the graph's random state (ops.def), which the
  // program binds on every run: fresh draws each replay, the same ones an
  // eager step would make.
  ir::Value* random = nullptr;
  for (const TraceRecord::Node& n : record.nodes) {
    if (n.kind == ir::NodeKind::kOp && ir::IsRandom(n.op)) {
      random = graph->AddParam("rng", ir::TensorType{ir::DType::kI64, {2}},
                               ir::ParamKind::kRandom);
      break;
    }
  }
  for (size_t i = 0; i < record.nodes.size(); ++i) {
    const TraceRecord::Node& n = record.nodes[i];
    if (n.kind == ir::NodeKind::kAssign) {
      if (options.write_back)
        graph->AddAssign(value(n.inputs[0]), value(n.inputs[1]));
      continue;
    }
    if (results[i] != nullptr) continue;  // lifted
    std::vector<ir::Value*> in;
    in.reserve(n.inputs.size());
    for (int id : n.inputs) in.push_back(value(id));
    if (ir::IsRandom(n.op)) in.push_back(random);
    results[i] = graph->AddOp(n.op, std::move(in), n.attrs, n.type)->output();
  }
  std::vector<ir::Value*> returns;
  if (options.returns) {
    for (int id : record.returns) returns.push_back(value(id));
  }
  for (int id : extra_returns) returns.push_back(value(id));
  graph->SetReturns(std::move(returns));
  return graph;
}

}  // namespace stepjit::frontend
