// amp-weight-copies: low-precision weight copies kept as state and written by
// the weight's update.
#include "passes/amp_weight_copies.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/rewrite.h"
#include "ir/status.h"
#include "passes/amp_graph.h"
#include "passes/ir_names.h"

namespace stepjit::passes {

namespace {

constexpr absl::string_view kSuffix = ".as_";

bool IsLowFloat(DType t) { return t == DType::kBF16 || t == DType::kF16; }

}  // namespace

std::string WeightCopyName(absl::string_view state, DType dtype) {
  return absl::StrCat(state, kSuffix, ir::DTypeName(dtype));
}

std::optional<WeightCopyOf> ParseWeightCopyName(absl::string_view name) {
  const size_t at = name.rfind(kSuffix);
  if (at == absl::string_view::npos || at == 0) return std::nullopt;
  const std::optional<DType> dtype =
      ir::ParseDType(name.substr(at + kSuffix.size()));
  if (!dtype || !IsLowFloat(*dtype)) return std::nullopt;
  return WeightCopyOf{std::string(name.substr(0, at)), *dtype};
}

absl::StatusOr<bool> AmpWeightCopies(ir::Graph& g, PassStats& stats) {
  RETURN_IF_ERROR(amp_graph::RequireUnfused(g, "amp-weight-copies"));
  absl::flat_hash_set<std::string> names;
  for (const Value* p : g.params()) names.insert(p->name());
  // The value each state param is written back with (the last write wins).
  absl::flat_hash_map<const Value*, Value*> written;
  size_t first_assign = g.nodes().size();
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node* n = g.nodes()[i].get();
    if (n->kind() != NodeKind::kAssign) continue;
    first_assign = std::min(first_assign, i);
    written[n->inputs()[0]] = n->inputs()[1];
  }
  // One copy per (state, dtype); every cast of it reads the copy.
  absl::flat_hash_map<std::pair<const Value*, DType>, Value*> copies;
  std::vector<std::pair<Value*, Value*>> added;  // (copy, state)
  ir::ValueReplacer replacer;
  for (const auto& node : g.nodes()) {
    const Node* n = node.get();
    if (n->kind() != NodeKind::kOp || n->op() != OpId::kCast) continue;
    Value* state = n->inputs()[0];
    if (!g.IsParam(state) || g.param_kind(state) != ir::ParamKind::kState ||
        state->type().dtype != DType::kF32) {
      continue;
    }
    const DType to = n->output()->type().dtype;
    if (!IsLowFloat(to)) continue;
    const auto key = std::make_pair(static_cast<const Value*>(state), to);
    auto it = copies.find(key);
    if (it == copies.end()) {
      std::string name = WeightCopyName(state->name(), to);
      // A graph that already has this param (the pass ran before) keeps it.
      if (names.contains(name)) continue;
      names.insert(name);
      Value* copy = g.AddParam(std::move(name), n->output()->type(),
                               ir::ParamKind::kState);
      it = copies.emplace(key, copy).first;
      added.emplace_back(copy, state);
    }
    replacer.Replace(n->output(), it->second);
  }
  if (added.empty()) return false;
  for (const auto& n : g.nodes()) replacer.ApplyTo(*n);
  // A returned cast stays a cast: a returned state tensor would change
  // under the caller at the next step.
  for (const auto& [copy, state] : added) {
    auto w = written.find(state);
    if (w == written.end()) continue;  // never written: converted once
    Node* update = g.AddOp(OpId::kCopyInplace, {copy, w->second}, ir::Attrs(),
                           copy->type());
    (void)update;
    g.MoveLastNodeTo(first_assign++);
    g.AddAssign(copy, g.nodes()[first_assign - 1]->output());
  }
  stats.Add("weight copies kept", static_cast<int64_t>(added.size()));
  return true;
}

}  // namespace stepjit::passes
