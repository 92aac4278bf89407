// The SSA IR: a Graph of Values and Nodes, with parameters, state write-back and fusion regions.
//
// A graph has parameters (step inputs or captured state), a list of nodes
// in program order, and a return list. Every Value is defined exactly once:
// by a parameter or by one output of a node. Node kinds:
//   kOp      one op of ir/ops.def: inputs, attributes, and one output, or
//            more where ops.def allows (a matmul's bias gradient; printed
//            `%9#1` like a fusion's results).
//   kFusion  a nested Graph (the region's body) applied to inputs; it has as
//            many outputs as its body returns (printed `%9#3`).
//   kAssign  writes its second input into the state parameter given as the
//            first (in-place write-back); no outputs.
// The text form is documented in ir/printer.h and round-trips exactly.
#ifndef STEPJIT_IR_GRAPH_H_
#define STEPJIT_IR_GRAPH_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "ir/attrs.h"
#include "ir/infer.h"
#include "ir/op.h"

namespace stepjit::ir {

class Node;
class Graph;

// kRandom: the graph's random state, i64[2] (the seed a run draws with and
// how far its draws are shifted from the traced offsets), which the program
// binds itself on every run (at most one per graph; random ops take it as
// their last operand, ops.def).
enum class ParamKind : uint8_t { kInput, kState, kRandom };

// "input", "state", "random" (the text form).
const char* ParamKindName(ParamKind kind);
// The kind that `text` names, or nullopt where it names none.
std::optional<ParamKind> ParseParamKind(absl::string_view text);

// A parameter or graph name: one or more of [A-Za-z0-9_.], not all digits
// (all-digit names are the printed numbers of node results).
bool IsValidParamName(absl::string_view name);

class Value {
 public:
  int id() const { return id_; }
  const TensorType& type() const { return type_; }
  void set_type(TensorType t) { type_ = std::move(t); }
  // Producing node, or nullptr for a graph parameter.
  Node* producer() const { return producer_; }
  // Output index within the producer (0 for single-output nodes).
  int index() const { return index_; }
  // Printed name without '%': a parameter's name, or the node's number.
  const std::string& name() const { return name_; }

 private:
  friend class Graph;
  int id_ = 0;
  TensorType type_;
  Node* producer_ = nullptr;
  int index_ = 0;
  std::string name_;
};

enum class NodeKind : uint8_t { kOp, kFusion, kAssign };

class Node {
 public:
  NodeKind kind() const { return kind_; }
  OpId op() const { return op_; }  // valid for kOp
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* output() const { return outputs_.empty() ? nullptr : outputs_[0]; }
  const Attrs& attrs() const { return attrs_; }
  Attrs& mutable_attrs() { return attrs_; }
  Graph* body() const { return body_.get(); }  // kFusion only
  void ReplaceInput(int i, Value* v) { inputs_[i] = v; }

 private:
  friend class Graph;
  NodeKind kind_ = NodeKind::kOp;
  OpId op_ = OpId::kAdd;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  Attrs attrs_;
  std::unique_ptr<Graph> body_;
};

class Graph {
 public:
  explicit Graph(std::string name) : name_(std::move(name)) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }

  // Parameters, in signature order. Names must be unique within the graph
  // and satisfy IsValidParamName (so that the text form round-trips).
  Value* AddParam(std::string name, TensorType type, ParamKind kind);
  const std::vector<Value*>& params() const { return params_; }
  ParamKind param_kind(const Value* param) const;
  // The kRandom parameter, or null.
  const Value* random_state() const;
  bool IsParam(const Value* v) const;

  // Appends an op node; its output type is given (callers infer it).
  Node* AddOp(OpId op, std::vector<Value*> inputs, Attrs attrs, TensorType type);
  // Appends an op node with one output per type (more than one: the results
  // are named `%N#i`).
  Node* AddOp(OpId op, std::vector<Value*> inputs, Attrs attrs,
              std::vector<TensorType> types);
  // Appends a fusion node over `body`, with one output per body return.
  Node* AddFusion(std::unique_ptr<Graph> body, std::vector<Value*> inputs);
  // Appends `assign state, value`.
  Node* AddAssign(Value* state, Value* value);

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  // Removes the nodes for which `dead` is true (their outputs must be unused).
  template <typename Pred>
  void EraseNodesIf(Pred dead) {
    std::erase_if(nodes_, [&](const std::unique_ptr<Node>& n) { return dead(n.get()); });
  }
  // Inserts a node created by Add* (currently last) before position `pos`.
  void MoveLastNodeTo(size_t pos);
  // Puts the nodes in `order`, which must be a permutation of nodes().
  void ReorderNodes(const std::vector<Node*>& order);

  void SetReturns(std::vector<Value*> values) { returns_ = std::move(values); }
  const std::vector<Value*>& returns() const { return returns_; }

  // Total number of values ever created (ids are dense in [0, n)).
  int num_values() const { return static_cast<int>(values_.size()); }

 private:
  Value* NewValue(TensorType type, std::string name);

  std::string name_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<Value*> params_;
  std::vector<ParamKind> param_kinds_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> returns_;
  int next_number_ = 0;
};

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_GRAPH_H_
