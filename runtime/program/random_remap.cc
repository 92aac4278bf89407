// RandomRemap: a replay's random nodes draw from the default generator.
#include "runtime/program/random_remap.h"

#include "runtime/generator.h"

namespace stepjit::runtime {

using ir::AttrKey;

int64_t RandomWords(const ir::Node& node) {
  const ir::OpId op = node.op();
  if (op == ir::OpId::kMultinomial) {  // as stepjit::multinomial reserves
    const ir::Shape& w = node.inputs()[0]->type().shape;
    const int64_t rows = ir::NumElements(w) / w.back();
    return rows * (node.attrs().GetBool(AttrKey::kReplacement)
                       ? node.attrs().GetInt(AttrKey::kNumSamples)
                       : w.back());
  }
  int64_t n = op == ir::OpId::kDropout
                  ? ir::NumElements(node.inputs()[0]->type().shape)
                  : ir::NumElements(node.output()->type().shape);
  return op == ir::OpId::kRandn ? 2 * n : n;
}

std::pair<uint64_t, uint64_t> RandomRemap::Draw(int64_t traced_offset,
                                                int64_t words) {
  auto it = offsets_.find(traced_offset);
  if (it == offsets_.end()) {
    it = offsets_
             .emplace(traced_offset,
                      default_generator().Reserve(static_cast<uint64_t>(words)))
             .first;
  }
  // The generator's current seed: manual_seed between calls must change a
  // replay's draws as it changes the eager step's.
  return {default_generator().seed(), it->second};
}

ir::Attrs RandomRemap::Apply(const ir::Node& node) {
  ir::Attrs attrs = node.attrs();
  const auto [seed, offset] =
      Draw(attrs.GetInt(AttrKey::kOffset), RandomWords(node));
  attrs.Set(AttrKey::kOffset, static_cast<int64_t>(offset));
  attrs.Set(AttrKey::kSeed, static_cast<int64_t>(seed));
  return attrs;
}

}  // namespace stepjit::runtime
