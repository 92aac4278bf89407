// SplitRegionAtReduction: one region becomes the part before its reduction
// and the part after it.
#include "passes/region_split.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/region_ops.h"
#include "passes/ir_names.h"

namespace stepjit::passes {

namespace {

int IndexOf(const std::vector<Value*>& values, const Value* v) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == v) return static_cast<int>(i);
  }
  return -1;
}

// A new region body whose parameters are made on first use, one per outer
// value that feeds them.
class BodyBuilder {
 public:
  explicit BodyBuilder(std::string name)
      : body_(std::make_unique<ir::Graph>(std::move(name))) {}

  Value* Param(Value* outer) {
    auto it = params_.find(outer);
    if (it != params_.end()) return it->second;
    Value* p = body_->AddParam(absl::StrCat("p", inputs_.size()), outer->type(),
                               ir::ParamKind::kInput);
    inputs_.push_back(outer);
    params_[outer] = p;
    return p;
  }
  // The outer value feeding `param` (a parameter of this body).
  Value* OuterOf(const Value* param) const {
    return inputs_[IndexOf(body_->params(), param)];
  }
  Value* Copy(const Node& n, std::vector<Value*> args) {
    return body_->AddOp(n.op(), std::move(args), n.attrs(), n.output()->type())
        ->output();
  }
  Value* Reshape(Value* x, const ir::TensorType& to) {
    ir::Attrs attrs{{ir::AttrKey::kShape,
                     std::vector<int64_t>(to.shape.begin(), to.shape.end())}};
    return body_->AddOp(OpId::kReshape, {x}, std::move(attrs), to)->output();
  }
  bool IsParam(const Value* v) const { return body_->IsParam(v); }
  // Appends the region to `g`; nothing (nullptr) when it returns nothing.
  Node* Finish(ir::Graph& g, std::vector<Value*> returns) {
    if (returns.empty()) return nullptr;
    body_->SetReturns(std::move(returns));
    return g.AddFusion(std::move(body_), std::move(inputs_));
  }

 private:
  std::unique_ptr<ir::Graph> body_;
  std::vector<Value*> inputs_;
  absl::flat_hash_map<const Value*, Value*> params_;
};

}  // namespace

absl::flat_hash_set<const Node*> DownstreamOf(const ir::Graph& body,
                                              const Node* node) {
  absl::flat_hash_set<const Node*> down = {node};
  for (const auto& n : body.nodes()) {
    for (const Value* v : n->inputs()) {
      if (down.contains(v->producer())) down.insert(n.get());
    }
  }
  return down;
}

RegionSplit SplitRegionAtReduction(ir::Graph& g, const Node& region,
                                   const Node* reduction, Value* reduced,
                                   Value* outer_reduced) {
  const ir::Graph& body = *region.body();
  const absl::flat_hash_set<const Node*> after = DownstreamOf(body, reduction);
  auto is_after = [&](const Value* v) { return after.contains(v->producer()); };
  auto outer_param = [&](const Value* p) {
    return region.inputs()[IndexOf(body.params(), p)];
  };
  // What the first part returns: the old results computed there, then the
  // values the second part reads from it (constants are copied instead).
  std::vector<const Value*> first_returns;
  absl::flat_hash_set<const Value*> listed;
  auto add_first = [&](const Value* v) {
    if (listed.insert(v).second) first_returns.push_back(v);
  };
  for (const Value* r : body.returns()) {
    if (!body.IsParam(r) && !is_after(r)) add_first(r);
  }
  for (const auto& n : body.nodes()) {
    if (!after.contains(n.get()) || n.get() == reduction) continue;
    for (const Value* v : n->inputs()) {
      const Node* p = v->producer();
      if (p != nullptr && !after.contains(p) && !ir::IsScalarConstant(p))
        add_first(v);
    }
  }
  // The first part: only the members those values need.
  absl::flat_hash_set<const Value*> needed(first_returns.begin(),
                                           first_returns.end());
  absl::flat_hash_set<const Node*> kept;
  for (auto it = body.nodes().rbegin(); it != body.nodes().rend(); ++it) {
    const Node* n = it->get();
    if (after.contains(n) || !needed.contains(n->output())) continue;
    kept.insert(n);
    needed.insert(n->inputs().begin(), n->inputs().end());
  }
  BodyBuilder first(body.name());
  absl::flat_hash_map<const Value*, Value*> map;
  for (const auto& n : body.nodes()) {
    if (!kept.contains(n.get())) continue;
    std::vector<Value*> args;
    for (const Value* v : n->inputs()) {
      auto it = map.find(v);
      args.push_back(it != map.end() ? it->second
                                     : first.Param(outer_param(v)));
    }
    map[n->output()] = first.Copy(*n, std::move(args));
  }
  std::vector<Value*> returns;
  for (const Value* v : first_returns) returns.push_back(map.at(v));
  RegionSplit split;
  split.before = first.Finish(g, std::move(returns));
  absl::flat_hash_map<const Value*, Value*> from_first;  // body value -> outer
  for (size_t i = 0; i < first_returns.size(); ++i) {
    from_first[first_returns[i]] = split.before->outputs()[i];
  }

  // The second part.
  BodyBuilder second(absl::StrCat(body.name(), "_post"));
  map.clear();
  Value* inner_reduction = nullptr;
  auto read = [&](const Value* v) -> Value* {
    if (auto it = map.find(v); it != map.end()) return it->second;
    if (v == reduction->output()) {
      if (inner_reduction == nullptr) {
        inner_reduction = second.Param(reduced);
        if (reduced->type() != v->type()) {
          inner_reduction = second.Reshape(inner_reduction, v->type());
        }
      }
      return inner_reduction;
    }
    const Node* p = v->producer();
    Value* inner = p == nullptr              ? second.Param(outer_param(v))
                   : ir::IsScalarConstant(p) ? second.Copy(*p, {})
                                             : second.Param(from_first.at(v));
    map[v] = inner;
    return inner;
  };
  for (const auto& n : body.nodes()) {
    if (!after.contains(n.get()) || n.get() == reduction) continue;
    if (n->kind() == NodeKind::kOp && n->op() == OpId::kReshape &&
        n->inputs()[0] == reduction->output() &&
        n->output()->type() == reduced->type()) {
      map[n->output()] = second.Param(reduced);
      continue;
    }
    std::vector<Value*> args;
    for (const Value* v : n->inputs()) args.push_back(read(v));
    map[n->output()] = second.Copy(*n, std::move(args));
  }
  returns.clear();
  std::vector<int> second_result(body.returns().size(), -1);
  split.results.assign(body.returns().size(), nullptr);
  for (size_t i = 0; i < body.returns().size(); ++i) {
    const Value* r = body.returns()[i];
    if (body.IsParam(r)) {
      split.results[i] = outer_param(r);
    } else if (r == reduction->output()) {
      split.results[i] = outer_reduced;
    } else if (!is_after(r)) {
      split.results[i] = from_first.at(r);
    } else if (Value* v = map.at(r); second.IsParam(v)) {
      split.results[i] = second.OuterOf(v);
    } else {
      second_result[i] = static_cast<int>(returns.size());
      returns.push_back(v);
    }
  }
  split.after = second.Finish(g, std::move(returns));
  for (size_t i = 0; i < second_result.size(); ++i) {
    if (second_result[i] >= 0) {
      split.results[i] = split.after->outputs()[second_result[i]];
    }
  }
  return split;
}

}  // namespace stepjit::passes
