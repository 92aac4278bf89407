// RandomRemap: a replay's random nodes draw from the default generator.
#include "runtime/program/random_remap.h"

#include <algorithm>
#include <limits>

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

namespace {
void Extend(const ir::Node& n, int64_t& first, int64_t& end) {
  const int64_t offset = n.attrs().GetInt(AttrKey::kOffset);
  first = std::min(first, offset);
  end = std::max(end, offset + RandomWords(n));
}
void ExtendOver(const ir::Graph& g, int64_t& first, int64_t& end) {
  for (const auto& n : g.nodes()) {
    if (n->kind() == ir::NodeKind::kFusion) {
      ExtendOver(*n->body(), first, end);
    } else if (n->kind() == ir::NodeKind::kOp &&
               ir::GetOpInfo(n->op()).kind == ir::OpKind::kRandom) {
      Extend(*n, first, end);
    }
  }
}
RandomLayout Layout(int64_t first, int64_t end) {
  return end > first ? RandomLayout{first, end - first} : RandomLayout{};
}
}  // namespace

RandomLayout LayoutOf(const ir::Graph& graph) {
  int64_t first = std::numeric_limits<int64_t>::max(), end = 0;
  ExtendOver(graph, first, end);
  return Layout(first, end);
}

RandomLayout LayoutOf(absl::Span<const ir::Node* const> random_nodes) {
  int64_t first = std::numeric_limits<int64_t>::max(), end = 0;
  for (const ir::Node* n : random_nodes) Extend(*n, first, end);
  return Layout(first, end);
}

std::pair<uint64_t, uint64_t> RandomRemap::Draw(int64_t traced_offset,
                                                int64_t words) {
  if (layout_.span > 0 && traced_offset >= layout_.first &&
      traced_offset + words <= layout_.first + layout_.span) {
    if (!reserved_) {
      base_ = default_generator().Reserve(static_cast<uint64_t>(layout_.span));
      reserved_ = true;
    }
    return {default_generator().seed(),
            base_ + static_cast<uint64_t>(traced_offset - layout_.first)};
  }
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
