// Where a graph's random draws lie in the generator's stream.
#include "program/random_layout.h"

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

}  // namespace stepjit::runtime
