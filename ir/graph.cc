// Graph construction: values with dense ids, parameters, and node appends.
#include "ir/graph.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace stepjit::ir {

bool IsValidParamName(absl::string_view name) {
  if (name.empty()) return false;
  bool all_digits = true;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '.') return false;
    all_digits &= absl::ascii_isdigit(c);
  }
  return !all_digits;
}

Value* Graph::NewValue(TensorType type, std::string name) {
  auto v = std::make_unique<Value>();
  v->id_ = num_values();
  v->type_ = std::move(type);
  v->name_ = std::move(name);
  values_.push_back(std::move(v));
  return values_.back().get();
}

Value* Graph::AddParam(std::string name, TensorType type, ParamKind kind) {
  SJ_CHECK(IsValidParamName(name), "invalid parameter name '", name, "'");
  for (const Value* p : params_) {
    SJ_CHECK(p->name() != name, "duplicate parameter name '", name, "'");
  }
  Value* v = NewValue(std::move(type), std::move(name));
  params_.push_back(v);
  param_kinds_.push_back(kind);
  return v;
}

ParamKind Graph::param_kind(const Value* param) const {
  auto it = std::find(params_.begin(), params_.end(), param);
  SJ_CHECK(it != params_.end(), "%", param->name(), " is not a parameter of @",
           name_);
  return param_kinds_[std::distance(params_.begin(), it)];
}

namespace {

// The text form of each kind, in ParamKind's order.
constexpr const char* kParamKindNames[] = {"input", "state", "random"};
static_assert(std::size(kParamKindNames) ==
              static_cast<size_t>(ParamKind::kRandom) + 1);

}  // namespace

const char* ParamKindName(ParamKind kind) {
  return kParamKindNames[static_cast<int>(kind)];
}

std::optional<ParamKind> ParseParamKind(absl::string_view text) {
  for (size_t i = 0; i < std::size(kParamKindNames); ++i) {
    if (text == kParamKindNames[i]) return static_cast<ParamKind>(i);
  }
  return std::nullopt;
}

const Value* Graph::random_state() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (param_kinds_[i] == ParamKind::kRandom) return params_[i];
  }
  return nullptr;
}

bool Graph::IsParam(const Value* v) const {
  return std::find(params_.begin(), params_.end(), v) != params_.end();
}

Node* Graph::AddOp(OpId op, std::vector<Value*> inputs, Attrs attrs,
                   TensorType type) {
  std::vector<TensorType> types;
  types.push_back(std::move(type));
  return AddOp(op, std::move(inputs), std::move(attrs), std::move(types));
}

Node* Graph::AddOp(OpId op, std::vector<Value*> inputs, Attrs attrs,
                   std::vector<TensorType> types) {
  SJ_CHECK(!types.empty(), "an op node needs at least one output");
  auto n = std::make_unique<Node>();
  n->kind_ = NodeKind::kOp;
  n->op_ = op;
  n->inputs_ = std::move(inputs);
  n->attrs_ = std::move(attrs);
  const int number = next_number_++;
  for (size_t i = 0; i < types.size(); ++i) {
    Value* out = NewValue(std::move(types[i]),
                          types.size() == 1 ? absl::StrCat(number)
                                            : absl::StrCat(number, "#", i));
    out->producer_ = n.get();
    out->index_ = static_cast<int>(i);
    n->outputs_.push_back(out);
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

Node* Graph::AddFusion(std::unique_ptr<Graph> body,
                       std::vector<Value*> inputs) {
  SJ_CHECK(body != nullptr);
  auto n = std::make_unique<Node>();
  n->kind_ = NodeKind::kFusion;
  n->inputs_ = std::move(inputs);
  // A fusion takes one number; its results are named like their text `%N#i`.
  const int number = next_number_++;
  for (size_t i = 0; i < body->returns().size(); ++i) {
    Value* out =
        NewValue(body->returns()[i]->type(), absl::StrCat(number, "#", i));
    out->producer_ = n.get();
    out->index_ = static_cast<int>(i);
    n->outputs_.push_back(out);
  }
  n->body_ = std::move(body);
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

Node* Graph::AddAssign(Value* state, Value* value) {
  SJ_CHECK(state != nullptr && value != nullptr);
  auto n = std::make_unique<Node>();
  n->kind_ = NodeKind::kAssign;
  n->inputs_ = {state, value};
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

void Graph::MoveLastNodeTo(size_t pos) {
  SJ_CHECK(!nodes_.empty() && pos < nodes_.size(), "position ", pos,
           " out of range for ", nodes_.size(), " nodes");
  std::rotate(nodes_.begin() + pos, nodes_.end() - 1, nodes_.end());
}

void Graph::ReorderNodes(const std::vector<Node*>& order) {
  SJ_CHECK(order.size() == nodes_.size(), "reorder needs every node once");
  absl::flat_hash_map<const Node*, size_t> rank;
  for (size_t i = 0; i < order.size(); ++i) rank[order[i]] = i;
  SJ_CHECK(rank.size() == nodes_.size(), "reorder lists a node twice");
  std::sort(nodes_.begin(), nodes_.end(),
            [&](const std::unique_ptr<Node>& a, const std::unique_ptr<Node>& b) {
              return rank.at(a.get()) < rank.at(b.get());
            });
}

}  // namespace stepjit::ir
