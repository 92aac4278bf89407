// Fresh random draws for a replay: the seed and Philox offset each random
// node of a traced graph takes on this run.
#ifndef STEPJIT_RUNTIME_PROGRAM_RANDOM_REMAP_H_
#define STEPJIT_RUNTIME_PROGRAM_RANDOM_REMAP_H_

#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "ir/attrs.h"
#include "ir/graph.h"

namespace stepjit::runtime {

// The draws of a replay: each random node takes a fresh slice of the default
// generator's stream under its current seed, in node order, as the eager
// step would have; nodes that shared a traced offset (dropout and its
// backward) share the new one.
class RandomRemap {
 public:
  // (seed, offset) for the draw traced at `traced_offset` of `words` Philox
  // words.
  std::pair<uint64_t, uint64_t> Draw(int64_t traced_offset, int64_t words);
  // `node`'s attributes with the new seed and offset.
  ir::Attrs Apply(const ir::Node& node);

 private:
  absl::flat_hash_map<int64_t, uint64_t> offsets_;
};
// Philox words a random node draws (randn: two per value).
int64_t RandomWords(const ir::Node& node);

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_PROGRAM_RANDOM_REMAP_H_
