// Fresh random draws for a replay: the seed and Philox offset each random
// node of a traced graph takes on this run.
#ifndef STEPJIT_RUNTIME_PROGRAM_RANDOM_REMAP_H_
#define STEPJIT_RUNTIME_PROGRAM_RANDOM_REMAP_H_

#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/graph.h"

namespace stepjit::runtime {

// Where a traced graph's random draws lay in the generator's stream: from
// the first traced offset, `span` words (the eager step reserved them one
// after the other, in dispatch order).
struct RandomLayout {
  int64_t first = 0;
  int64_t span = 0;  // 0: the graph draws nothing
};
RandomLayout LayoutOf(const ir::Graph& graph);
RandomLayout LayoutOf(absl::Span<const ir::Node* const> random_nodes);

// The draws of a replay: the span the eager step would reserve is reserved
// from the default generator (under its current seed) at the first draw,
// and each random node takes the slice at its traced place in it, so that a
// replay draws exactly what the eager step would draw from the same
// generator state, whatever order the compiled graph runs its random nodes
// in (and the generator advances as eager's would). Nodes that shared a
// traced offset (dropout and its backward) share the new one. Without a
// layout (or for an offset outside it), each traced offset takes a fresh
// slice in the order drawn.
class RandomRemap {
 public:
  RandomRemap() = default;
  explicit RandomRemap(RandomLayout layout) : layout_(layout) {}
  // (seed, offset) for the draw traced at `traced_offset` of `words` Philox
  // words.
  std::pair<uint64_t, uint64_t> Draw(int64_t traced_offset, int64_t words);
  // `node`'s attributes with the new seed and offset.
  ir::Attrs Apply(const ir::Node& node);

 private:
  RandomLayout layout_;
  bool reserved_ = false;
  uint64_t base_ = 0;
  absl::flat_hash_map<int64_t, uint64_t> offsets_;
};
// Philox words a random node draws (randn: two per value).
int64_t RandomWords(const ir::Node& node);

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_PROGRAM_RANDOM_REMAP_H_
