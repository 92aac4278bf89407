// Trace records: canonical operand numbering, random-op normalization and
// user-facing diffs.
#include "frontend/trace_record.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/printer.h"

namespace stepjit::frontend {
namespace {

using ir::AttrKey;

// Seeds and absolute offsets of random ops vary from call to call; the
// offsets' pattern (which draws share a slice) is what the graph means.
ir::Attrs Normalized(const ir::Node& node,
                     absl::flat_hash_map<int64_t, int64_t>& offsets) {
  if (node.kind() != ir::NodeKind::kOp ||
      ir::GetOpInfo(node.op()).kind != ir::OpKind::kRandom) {
    return node.attrs();
  }
  ir::Attrs out;
  for (const auto& [key, value] : node.attrs().items()) {
    if (key == AttrKey::kSeed) continue;
    if (key == AttrKey::kOffset) {
      const int64_t rank = static_cast<int64_t>(offsets.size());
      out.Set(key,
              offsets.try_emplace(node.attrs().GetInt(AttrKey::kOffset), rank)
                  .first->second);
      continue;
    }
    out.Set(key, value);
  }
  return out;
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
std::string DiffAttrs(const ir::Attrs& a, const ir::Attrs& b) {
  for (const auto& [key, value] : a.items()) {
    const ir::AttrValue* other = b.Find(key);
    if (other == nullptr || !(*other == value)) {
      return absl::StrCat(AttrText(b, key), " now, traced with ",
                          AttrText(a, key));
    }
  }
  for (const auto& [key, value] : b.items()) {
    if (!a.Has(key))
      return absl::StrCat(AttrText(b, key), " now, traced without it");
  }
  return "";
}

}  // namespace

TraceRecord RecordTrace(const Trace& trace) {
  TraceRecord r;
  const ir::Graph& g = *trace.graph;
  absl::flat_hash_map<const ir::Value*, int> index;
  size_t state_index = 0;
  for (const ir::Value* p : g.params()) {
    const ir::ParamKind kind = g.param_kind(p);
    const TensorImpl* impl = nullptr;
    if (kind == ir::ParamKind::kState && state_index < trace.state.size()) {
      impl = trace.state[state_index++].impl();
    }
    index[p] = static_cast<int>(r.params.size());
    r.params.push_back({kind, p->type(), impl});
  }
  int next = static_cast<int>(r.params.size());
  absl::flat_hash_map<int64_t, int64_t> offsets;
  for (const auto& node : g.nodes()) {
    TraceRecord::Node n{
        node->kind(), node->op(), {}, Normalized(*node, offsets), {}};
    for (const ir::Value* v : node->inputs()) n.inputs.push_back(index.at(v));
    if (node->output() != nullptr) n.type = node->output()->type();
    for (const ir::Value* v : node->outputs()) index[v] = next++;
    r.nodes.push_back(std::move(n));
  }
  for (const ir::Value* v : g.returns()) r.returns.push_back(index.at(v));
  r.num_outputs = trace.num_outputs;
  for (const GradBinding& b : trace.grad_bindings) {
    r.grad_bindings.push_back({b.leaf.impl(), b.return_index});
  }
  return r;
}

std::string DiffTraces(const TraceRecord& traced, const TraceRecord& now) {
  const size_t params = std::min(traced.params.size(), now.params.size());
  for (size_t i = 0; i < params; ++i) {
    const TraceRecord::Param& a = traced.params[i];
    const TraceRecord::Param& b = now.params[i];
    if (a.kind != b.kind || !(a.type == b.type)) {
      return absl::StrCat("graph parameter ", i, " is ", ir::PrintType(b.type),
                          b.kind == ir::ParamKind::kState ? " state" : " input",
                          " now, traced as ", ir::PrintType(a.type),
                          a.kind == ir::ParamKind::kState ? " state" : " input",
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
    if (!(a.attrs == b.attrs)) {
      return absl::StrCat(
          NodeName(b, i), " has ", DiffAttrs(a.attrs, b.attrs),
          ": a host number entered the graph as a constant (a captured double, "
          "or a setter such as opt.set_lr() called inside the step); make it a "
          "0-d tensor updated outside the step (fill_) so that a change needs "
          "no retrace");
    }
    if (!(a.type == b.type)) {
      return absl::StrCat(NodeName(b, i), " gives ", ir::PrintType(b.type),
                          " now, traced as ", ir::PrintType(a.type));
    }
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

}  // namespace stepjit::frontend
