// A generated region's operands: return aliases, binding and write-back.
#include "program/region_operands.h"

#include "absl/container/flat_hash_map.h"
#include "ir/op.h"
#include "runtime/storage.h"

namespace stepjit::runtime {

using ir::AttrKey;
using ir::NodeKind;

std::vector<int> ReturnAliases(const ir::Graph& body) {
  absl::flat_hash_map<const ir::Value*, int> alias;
  for (size_t i = 0; i < body.params().size(); ++i)
    alias[body.params()[i]] = static_cast<int>(i);
  for (const auto& n : body.nodes()) {
    if (n->kind() != NodeKind::kOp || n->inputs().empty()) continue;
    auto it = alias.find(n->inputs()[0]);
    if (it == alias.end()) continue;
    if (ir::IsInplace(n->op()) && n->attrs().GetBool(AttrKey::kInPlace)) {
      alias[n->output()] = it->second;
    }
  }
  std::vector<int> out;
  for (const ir::Value* r : body.returns()) {
    auto it = alias.find(r);
    out.push_back(it == alias.end() ? -1 : it->second);
  }
  // Two returns in one buffer would overwrite each other.
  for (size_t i = 0; i < out.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (out[i] >= 0 && out[i] == out[j]) out[i] = -1;
    }
  }
  return out;
}

std::optional<GeneratedOperands> BindGenerated(
    const ir::Graph& body, const std::vector<int>& return_alias, Device device,
    std::vector<Tensor>& in) {
  GeneratedOperands ops;
  for (size_t i = 0; i < in.size(); ++i) {
    const ir::TensorType& t = body.params()[i]->type();
    if (in[i].dtype() != t.dtype || in[i].shape() != t.shape ||
        in[i].device() != device) {
      return std::nullopt;
    }
    if (!in[i].is_contiguous()) in[i] = in[i].contiguous();
    ops.ptrs.push_back(in[i].data_ptr());
  }
  for (size_t r = 0; r < body.returns().size(); ++r) {
    const ir::TensorType& t = body.returns()[r]->type();
    const int alias = return_alias[r];
    ops.out.push_back(
        alias >= 0 && in[alias].shape() == t.shape
            ? in[alias]
            : empty(t.shape, {.dtype = t.dtype, .device = device}));
    ops.ptrs.push_back(ops.out.back().data_ptr());
  }
  return ops;
}

void FinishGenerated(const std::vector<int>& return_alias,
                     const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  for (size_t r = 0; r < out.size(); ++r) {
    if (return_alias[r] >= 0 && out[r].is_same(in[return_alias[r]]))
      out[r].storage()->BumpVersion();
  }
}

}  // namespace stepjit::runtime
