// Rewriting a graph's uses: the value-replacement utility every rewriting
// pass shares.
//
// A pass that replaces values (a fused region's results for the ops it
// absorbed, a folded constant, a cast removed) records `from -> to` and
// applies the map to the nodes after the rewrite and to the graph's
// returns. Chains (a -> b, b -> c) are followed.
#ifndef STEPJIT_IR_REWRITE_H_
#define STEPJIT_IR_REWRITE_H_

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "ir/graph.h"

namespace stepjit::ir {

// Values of one graph only: a fusion body gets its own replacer.
class ValueReplacer {
 public:
  void Replace(const Value* from, Value* to) { map_[from] = to; }
  // `v` after all recorded replacements (chains are followed).
  Value* Resolve(Value* v) const;
  // Rewrites the node's inputs (which covers assign operands); true if any
  // changed.
  bool ApplyTo(Node& node) const;
  // Rewrites the graph's returns; true if any changed.
  bool ApplyToReturns(Graph& graph) const;
  // Rewrites the inputs of every node of `graph` but those `skip` names
  // (nodes about to be erased), then its returns; true if anything changed.
  bool ApplyToGraph(
      Graph& graph, absl::FunctionRef<bool(const Node*)> skip =
                        [](const Node*) { return false; }) const;
  bool empty() const { return map_.empty(); }

 private:
  absl::flat_hash_map<const Value*, Value*> map_;
};

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_REWRITE_H_
