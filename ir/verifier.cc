// The IR verifier: structural and type invariants, reported as the text names
// them.
#include "ir/verifier.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/op_attrs.h"
#include "ir/printer.h"
#include "ir/status.h"

namespace stepjit::ir {
namespace {

class GraphVerifier {
 public:
  // `outer` lists the namings of the graphs enclosing a fusion body, only to
  // explain operands that refer to them.
  GraphVerifier(const Graph& graph, std::vector<const ValueNames*> outer)
      : graph_(graph), names_(graph), outer_(std::move(outer)) {}

  absl::Status Run() {
    if (!IsValidParamName(graph_.name())) {
      return Invalid(
          absl::StrCat("graph name @", graph_.name(), " is not a valid name"));
    }
    RETURN_IF_ERROR(CheckRandomParam());
    for (size_t pos = 0; pos < graph_.nodes().size(); ++pos) {
      const Node& node = *graph_.nodes()[pos];
      const std::string header = PrintNodeHeader(node, names_);
      RETURN_IF_ERROR(
          CheckOperands(node.inputs(), static_cast<int>(pos), header));
      if (node.kind() != NodeKind::kOp && !node.attrs().items().empty()) {
        return Invalid(
            absl::StrCat(header, ": only op nodes carry attributes"));
      }
      switch (node.kind()) {
        case NodeKind::kOp:
          RETURN_IF_ERROR(CheckOp(node, header));
          break;
        case NodeKind::kFusion:
          RETURN_IF_ERROR(CheckFusion(node, header));
          break;
        case NodeKind::kAssign:
          RETURN_IF_ERROR(CheckAssign(node, header));
          break;
      }
    }
    std::string header = "return";
    for (size_t i = 0; i < graph_.returns().size(); ++i) {
      absl::StrAppend(&header, i == 0 ? " " : ", ",
                      names_.Name(graph_.returns()[i]));
    }
    return CheckOperands(graph_.returns(),
                         static_cast<int>(graph_.nodes().size()), header);
  }

 private:
  bool in_fusion() const { return !outer_.empty(); }

  absl::Status Invalid(absl::string_view message) const {
    return absl::InvalidArgumentError(message);
  }

  // Operands of the node at `pos` must be defined before it in this graph.
  absl::Status CheckOperands(const std::vector<Value*>& operands, int pos,
                             const std::string& header) const {
    for (size_t i = 0; i < operands.size(); ++i) {
      const Value* v = operands[i];
      if (v == nullptr) {
        return Invalid(absl::StrCat(header, ": operand ", i, " is null"));
      }
      std::optional<int> at = names_.DefinedAt(v);
      if (!at) {
        for (const ValueNames* outer : outer_) {
          if (std::optional<std::string> name = outer->Find(v)) {
            return Invalid(absl::StrCat(header, ": operand ", i, " is ", *name,
                                        " of an enclosing "
                                        "graph; fusion body @",
                                        graph_.name(),
                                        " sees only its own parameters"));
          }
        }
        return Invalid(absl::StrCat(header, ": operand ", i,
                                    " is not defined in graph @",
                                    graph_.name()));
      }
      if (*at >= pos) {
        return Invalid(absl::StrCat(header, ": operand ", names_.Name(v),
                                    " is used before its definition"));
      }
    }
    return absl::OkStatus();
  }

  // At most one `random` parameter, i64[2], and none in a fusion body
  // (random ops are not fused).
  absl::Status CheckRandomParam() const {
    const Value* found = nullptr;
    for (const Value* p : graph_.params()) {
      if (graph_.param_kind(p) != ParamKind::kRandom) continue;
      if (in_fusion()) {
        return Invalid(absl::StrCat("fusion body @", graph_.name(),
                                    " has a random parameter %", p->name(),
                                    "; only a top-level graph has one"));
      }
      if (found != nullptr) {
        return Invalid(absl::StrCat("graph @", graph_.name(),
                                    " has two random parameters, %",
                                    found->name(), " and %", p->name()));
      }
      if (p->type() != TensorType{DType::kI64, {2}}) {
        return Invalid(absl::StrCat("random parameter %", p->name(),
                                    " must be i64[2] (seed, shift), got ",
                                    PrintType(p->type())));
      }
      found = p;
    }
    return absl::OkStatus();
  }

  absl::Status CheckOp(const Node& node, const std::string& header) const {
    const OpInfo& info = GetOpInfo(node.op());
    const int n = static_cast<int>(node.inputs().size());
    if (TakesRandomState(node.op(), node.inputs().size()) &&
        node.inputs().back() != graph_.random_state()) {
      return Invalid(absl::StrCat(
          header, ": its last operand ", names_.Name(node.inputs().back()),
          " must be the graph's random parameter (a `random` param, "
          "i64[2])"));
    }
    if (n < info.min_arity || n > info.max_arity) {
      return Invalid(absl::StrCat(header, ": `", info.name, "` expects ",
                                  info.min_arity,
                                  info.min_arity == info.max_arity
                                      ? ""
                                      : absl::StrCat(" to ", info.max_arity),
                                  " operands, got ", n));
    }
    if (absl::Status attrs = CheckAttrs(node.op(), node.attrs()); !attrs.ok())
      return Invalid(absl::StrCat(header, ": ", attrs.message()));
    std::vector<TensorType> types;
    for (const Value* v : node.inputs()) types.push_back(v->type());
    const int results = static_cast<int>(node.outputs().size());
    absl::StatusOr<std::vector<TensorType>> inferred =
        InferTypes(node.op(), types, node.attrs(), results);
    if (!inferred.ok()) {
      return Invalid(absl::StrCat(header, ": ", inferred.status().message()));
    }
    for (int i = 0; i < results; ++i) {
      const TensorType& declared = node.outputs()[i]->type();
      if ((*inferred)[i] == declared) continue;
      return Invalid(absl::StrCat(
          header, ": declared ",
          results == 1 ? "type " : absl::StrCat("result #", i, " type "),
          PrintType(declared), " but inferred ", PrintType((*inferred)[i])));
    }
    return absl::OkStatus();
  }

  absl::Status CheckFusion(const Node& node, const std::string& header) const {
    const Graph& body = *node.body();
    std::vector<const ValueNames*> outer = outer_;
    outer.push_back(&names_);
    absl::Status status = GraphVerifier(body, std::move(outer)).Run();
    if (!status.ok()) {
      return Invalid(
          absl::StrCat("in fusion @", body.name(), ": ", status.message()));
    }
    if (node.inputs().size() != body.params().size()) {
      return Invalid(absl::StrCat(header, ": ", node.inputs().size(),
                                  " inputs for ", body.params().size(),
                                  " body parameters"));
    }
    for (size_t i = 0; i < node.inputs().size(); ++i) {
      const Value* in = node.inputs()[i];
      const Value* param = body.params()[i];
      if (in->type() != param->type()) {
        return Invalid(
            absl::StrCat(header, ": input ", i, " (", names_.Name(in), ") is ",
                         PrintType(in->type()), " but body parameter %",
                         param->name(), " is ", PrintType(param->type())));
      }
    }
    if (node.outputs().size() != body.returns().size()) {
      return Invalid(absl::StrCat(header, ": ", node.outputs().size(),
                                  " results but the body returns ",
                                  body.returns().size(), " values"));
    }
    const ValueNames body_names(body);
    for (size_t i = 0; i < node.outputs().size(); ++i) {
      const Value* out = node.outputs()[i];
      const Value* ret = body.returns()[i];
      if (out->type() != ret->type()) {
        return Invalid(absl::StrCat(
            header, ": result #", i, " is declared ", PrintType(out->type()),
            " but the body returns ", body_names.Name(ret), " of type ",
            PrintType(ret->type())));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckAssign(const Node& node, const std::string& header) const {
    if (in_fusion()) {
      return Invalid(absl::StrCat(header,
                                  ": assign is not allowed inside "
                                  "fusion body @",
                                  graph_.name()));
    }
    const Value* target = node.inputs()[0];
    const Value* value = node.inputs()[1];
    if (names_.DefinedAt(target) != -1) {
      return Invalid(absl::StrCat(header, ": target ", names_.Name(target),
                                  " is not a parameter"));
    }
    if (graph_.param_kind(target) != ParamKind::kState) {
      return Invalid(absl::StrCat(header, ": target ", names_.Name(target),
                                  " is an input parameter, not state"));
    }
    if (value->type() != target->type()) {
      return Invalid(absl::StrCat(header, ": value ", names_.Name(value),
                                  " is ", PrintType(value->type()),
                                  " but state ", names_.Name(target), " is ",
                                  PrintType(target->type())));
    }
    return absl::OkStatus();
  }

  const Graph& graph_;
  const ValueNames names_;
  const std::vector<const ValueNames*> outer_;
};

}  // namespace

absl::Status Verify(const Graph& graph) {
  return GraphVerifier(graph, {}).Run();
}

}  // namespace stepjit::ir
