// Where a graph's random draws lie in the generator's stream. A program
// reserves that span from the default generator on every run and passes the
// graph's random ops its seed and how far the span moved from the traced one
// (their random state operand, ops.def), so that a replay draws exactly what
// the eager step would draw from the same generator state, whatever order it
// runs its random ops in, and advances the generator as eager's would. Ops
// that shared a traced offset (dropout and its backward) share the new one.
#ifndef STEPJIT_PROGRAM_RANDOM_LAYOUT_H_
#define STEPJIT_PROGRAM_RANDOM_LAYOUT_H_

#include <cstdint>

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

// Philox words a random node draws (randn: two per value).
int64_t RandomWords(const ir::Node& node);

}  // namespace stepjit::runtime

#endif  // STEPJIT_PROGRAM_RANDOM_LAYOUT_H_
