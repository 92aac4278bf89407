// cse: keeps the first node of each expression; later duplicates redirect.
#include "passes/cse.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "ir/rewrite.h"

namespace stepjit::passes {
namespace {

// Doubles are compared and hashed by their bits: 0.0 and -0.0 are different
// constants, and a NaN attribute still equals itself.
uint64_t Bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
}

size_t HashAttrValue(const ir::AttrValue& value) {
  const size_t alternative = std::visit(
      [](const auto& v) -> size_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>) {
          return absl::Hash<uint64_t>()(Bits(v));
        } else if constexpr (std::is_same_v<T, ir::DType>) {
          return absl::Hash<int>()(static_cast<int>(v));
        } else {
          return absl::Hash<T>()(v);
        }
      },
      value);
  return absl::Hash<std::pair<size_t, size_t>>()({value.index(), alternative});
}

bool SameAttrValue(const ir::AttrValue& a, const ir::AttrValue& b) {
  const double* da = std::get_if<double>(&a);
  const double* db = std::get_if<double>(&b);
  if (da != nullptr && db != nullptr) return Bits(*da) == Bits(*db);
  return a == b;
}

bool SameAttrs(const ir::Attrs& a, const ir::Attrs& b) {
  if (a.items().size() != b.items().size()) return false;
  for (const auto& [key, value] : a.items()) {
    const ir::AttrValue* other = b.Find(key);
    if (other == nullptr || !SameAttrValue(value, *other)) return false;
  }
  return true;
}

// Inputs in a canonical order: a commutative binary op's two operands are
// sorted by value id, which is unique within the graph.
std::vector<const ir::Value*> Operands(const ir::Node& node) {
  std::vector<const ir::Value*> in(node.inputs().begin(), node.inputs().end());
  const bool commutative = ir::GetOpInfo(node.op()).flags & ir::kCommutative;
  if (commutative && in.size() == 2 && in[1]->id() < in[0]->id()) {
    std::swap(in[0], in[1]);
  }
  return in;
}

// The same number of results (a matmul with its bias gradient is not a
// plain matmul), of the same types.
bool SameTypes(const ir::Node& a, const ir::Node& b) {
  if (a.outputs().size() != b.outputs().size()) return false;
  for (size_t i = 0; i < a.outputs().size(); ++i) {
    if (a.outputs()[i]->type() != b.outputs()[i]->type()) return false;
  }
  return true;
}

struct NodeHash {
  size_t operator()(const ir::Node* node) const {
    std::vector<uint64_t> words = {
        static_cast<uint64_t>(node->op()),
        static_cast<uint64_t>(node->outputs().size())};
    for (const ir::Value* out : node->outputs()) {
      words.push_back(static_cast<uint64_t>(out->type().dtype));
      for (int64_t d : out->type().shape) words.push_back(d);
    }
    for (const ir::Value* v : Operands(*node)) words.push_back(v->id());
    // Attribute order does not matter: sum the item hashes.
    size_t attrs = 0;
    for (const auto& [key, value] : node->attrs().items()) {
      attrs += absl::Hash<std::pair<int, size_t>>()(
          {static_cast<int>(key), HashAttrValue(value)});
    }
    words.push_back(attrs);
    return absl::Hash<std::vector<uint64_t>>()(words);
  }
};

struct NodeEq {
  bool operator()(const ir::Node* a, const ir::Node* b) const {
    return a->op() == b->op() && SameTypes(*a, *b) &&
           Operands(*a) == Operands(*b) && SameAttrs(a->attrs(), b->attrs());
  }
};

// Merges duplicates in `graph` and, separately, in each fusion body;
// returns how many nodes were merged away.
int64_t MergeDuplicates(ir::Graph& graph) {
  ir::ValueReplacer replacer;
  absl::flat_hash_set<const ir::Node*, NodeHash, NodeEq> seen;
  absl::flat_hash_set<const ir::Node*> duplicates;
  int64_t merged = 0;
  for (const auto& owned : graph.nodes()) {
    ir::Node& node = *owned;
    replacer.ApplyTo(node);
    if (node.kind() == ir::NodeKind::kFusion) {
      merged += MergeDuplicates(*node.body());
      continue;
    }
    if (node.kind() != ir::NodeKind::kOp || !ir::IsPure(node.op())) continue;
    auto [it, inserted] = seen.insert(&node);
    if (!inserted) {
      for (size_t i = 0; i < node.outputs().size(); ++i) {
        replacer.Replace(node.outputs()[i], (*it)->outputs()[i]);
      }
      duplicates.insert(&node);
    }
  }
  replacer.ApplyToReturns(graph);
  if (!duplicates.empty()) {
    graph.EraseNodesIf(
        [&](const ir::Node* n) { return duplicates.contains(n); });
  }
  return merged + static_cast<int64_t>(duplicates.size());
}

}  // namespace

absl::StatusOr<bool> EliminateCommonSubexpressions(ir::Graph& graph,
                                                   PassStats& stats) {
  const int64_t merged = MergeDuplicates(graph);
  stats.Add("nodes merged", merged);
  return merged > 0;
}

}  // namespace stepjit::passes
