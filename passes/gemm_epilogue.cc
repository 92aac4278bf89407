// GEMM epilogues: marked before regions form, absorbed into the matmul after.
#include "passes/gemm_epilogue.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/gemm_epilogue.h"
#include "ir/rewrite.h"
#include "passes/ir_names.h"

namespace stepjit::passes {

namespace {

using UseMap = absl::flat_hash_map<const Value*, std::vector<Node*>>;

// One entry per operand slot, so a node reading a value twice counts twice.
UseMap Uses(const ir::Graph& g) {
  UseMap uses;
  for (const auto& n : g.nodes()) {
    for (const Value* v : n->inputs()) uses[v].push_back(n.get());
  }
  return uses;
}

Node* SoleUse(const UseMap& uses, const Value* v) {
  auto it = uses.find(v);
  return it != uses.end() && it->second.size() == 1 ? it->second[0] : nullptr;
}

bool IsOp(const Node* n, OpId op) {
  return n != nullptr && n->kind() == NodeKind::kOp && n->op() == op;
}

// An op the table marks kGemmActivation (ir/ops.def).
bool IsActivation(const Node* n) {
  return n != nullptr && n->kind() == NodeKind::kOp &&
         ir::IsGemmActivation(n->op());
}

bool Returns(const ir::Graph& g, const Value* v) {
  for (const Value* r : g.returns()) {
    if (r == v) return true;
  }
  return false;
}

size_t PositionOf(const ir::Graph& g, const Node* n) {
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (g.nodes()[i].get() == n) return i;
  }
  return g.nodes().size();
}

int IndexOf(const std::vector<Value*>& values, const Value* v) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == v) return static_cast<int>(i);
  }
  return -1;
}

// A matmul and the bias add (and activation) it can absorb. `add` and `act`
// are nodes of the region's body, or `add` is `user` itself when the add
// stands alone.
struct Match {
  Node* matmul;
  Node* user;
  Value* bias;  // in the outer graph
  const Node* add;
  const Node* act;  // nullptr: bias only
};

std::optional<Match> FindAbsorbable(const ir::Graph& g, Node* mm) {
  if (mm->inputs().size() != 2 || !ir::GemmEpilogueOf(mm->attrs()).has_bias()) {
    return std::nullopt;
  }
  const Value* out = mm->output();
  const ir::TensorType& type = out->type();
  const UseMap uses = Uses(g);
  Node* user = SoleUse(uses, out);
  if (user == nullptr || Returns(g, out)) return std::nullopt;
  const size_t mm_at = PositionOf(g, mm);
  auto bias_ok = [&](const Value* b) {
    if (b->type() != ir::TensorType{type.dtype, ir::Shape{type.shape.back()}}) {
      return false;
    }
    return b->producer() == nullptr || PositionOf(g, b->producer()) < mm_at;
  };
  if (IsOp(user, OpId::kAdd)) {
    Value* b = user->inputs()[user->inputs()[0] == out ? 1 : 0];
    if (user->output()->type() != type || !bias_ok(b)) return std::nullopt;
    return Match{mm, user, b, user, nullptr};
  }
  if (user->kind() != NodeKind::kFusion) return std::nullopt;
  const ir::Graph& body = *user->body();
  for (const auto& n : body.nodes()) {
    if (n->kind() != NodeKind::kOp) return std::nullopt;
  }
  const Value* p = body.params()[IndexOf(user->inputs(), out)];
  const UseMap body_uses = Uses(body);
  const Node* add = SoleUse(body_uses, p);
  if (!IsOp(add, OpId::kAdd) || Returns(body, p)) return std::nullopt;
  const Value* q = add->inputs()[add->inputs()[0] == p ? 1 : 0];
  const int kb = IndexOf(body.params(), q);
  if (q == p || kb < 0) return std::nullopt;
  Value* b = user->inputs()[kb];
  if (add->output()->type() != type || !bias_ok(b)) return std::nullopt;
  const Node* act = SoleUse(body_uses, add->output());
  if (!IsActivation(act) || act->output()->type() != type ||
      Returns(body, add->output())) {
    act = nullptr;
  }
  return Match{mm, user, b, add, act};
}

// Rebuilds the region of `m` without its add/activation; `carried` (the new
// matmul's output) feeds the matmul's parameter. Records in `replace` the
// outer value that stands for each result of the old region.
void RebuildRegion(ir::Graph& g, const Match& m, Value* carried,
                   ir::ValueReplacer& replace) {
  const ir::Graph& body = *m.user->body();
  const Value* p = body.params()[IndexOf(m.user->inputs(), m.matmul->output())];
  const Value* result = m.act != nullptr ? m.act->output() : m.add->output();
  auto resolve = [&](const Value* v) { return v == result ? p : v; };
  auto removed = [&](const Node* n) { return n == m.add || n == m.act; };
  absl::flat_hash_set<const Value*> read;
  for (const auto& n : body.nodes()) {
    if (removed(n.get())) continue;
    for (const Value* v : n->inputs()) read.insert(resolve(v));
  }
  auto outer_of = [&](const Value* param) {
    return param == p ? carried
                      : m.user->inputs()[IndexOf(body.params(), param)];
  };
  auto nb = std::make_unique<ir::Graph>(body.name());
  absl::flat_hash_map<const Value*, Value*> map;
  std::vector<Value*> inputs;
  for (Value* param : body.params()) {
    if (!read.contains(param)) continue;
    map[param] = nb->AddParam(absl::StrCat("p", inputs.size()), param->type(),
                              body.param_kind(param));
    inputs.push_back(outer_of(param));
  }
  for (const auto& n : body.nodes()) {
    if (removed(n.get())) continue;
    std::vector<Value*> args;
    for (const Value* v : n->inputs()) args.push_back(map.at(resolve(v)));
    map[n->output()] =
        nb->AddOp(n->op(), std::move(args), n->attrs(), n->output()->type())
            ->output();
  }
  // A result that is now a bare parameter is read from outside instead.
  std::vector<Value*> returns;
  std::vector<std::pair<int, int>> kept;  // (old result, new result)
  for (size_t i = 0; i < body.returns().size(); ++i) {
    const Value* r = resolve(body.returns()[i]);
    if (body.IsParam(r)) {
      replace.Replace(m.user->outputs()[i], outer_of(r));
    } else {
      kept.emplace_back(static_cast<int>(i), static_cast<int>(returns.size()));
      returns.push_back(map.at(r));
    }
  }
  if (returns.empty()) return;
  nb->SetReturns(std::move(returns));
  Node* fusion = g.AddFusion(std::move(nb), std::move(inputs));
  g.MoveLastNodeTo(PositionOf(g, m.user));
  for (auto [from, to] : kept)
    replace.Replace(m.user->outputs()[from], fusion->outputs()[to]);
}

void Absorb(ir::Graph& g, const Match& m) {
  ir::Attrs attrs = m.matmul->attrs();
  attrs.Set(ir::AttrKey::kEpilogue,
            ir::GemmEpilogueText(m.act != nullptr
                                     ? ir::GemmEpilogue::BiasAct(m.act->op())
                                     : ir::GemmEpilogue::Bias()));
  Node* mm = g.AddOp(OpId::kMatmul,
                     {m.matmul->inputs()[0], m.matmul->inputs()[1], m.bias},
                     std::move(attrs), m.matmul->output()->type());
  g.MoveLastNodeTo(PositionOf(g, m.matmul));
  ir::ValueReplacer replace;
  if (m.user->kind() == NodeKind::kOp) {
    replace.Replace(m.user->output(), mm->output());
  } else {
    RebuildRegion(g, m, mm->output(), replace);
  }
  g.EraseNodesIf([&](const Node* n) { return n == m.matmul || n == m.user; });
  replace.ApplyToGraph(g);
}

}  // namespace

int MarkGemmEpilogues(ir::Graph& g) {
  const UseMap uses = Uses(g);
  int marked = 0;
  for (const auto& n : g.nodes()) {
    // A third operand or a second result: the epilogue is absorbed already.
    if (!IsOp(n.get(), OpId::kMatmul) || n->inputs().size() != 2 ||
        n->outputs().size() != 1) {
      continue;
    }
    ir::GemmEpilogue epilogue;
    const Node* add = SoleUse(uses, n->output());
    const int64_t cols = n->output()->type().shape.back();
    if (IsOp(add, OpId::kAdd)) {
      const Value* bias =
          add->inputs()[add->inputs()[0] == n->output() ? 1 : 0];
      if (bias->type().shape == ir::Shape{cols}) {
        const Node* act = SoleUse(uses, add->output());
        epilogue = IsActivation(act) ? ir::GemmEpilogue::BiasAct(act->op())
                                     : ir::GemmEpilogue::Bias();
      }
    }
    if (epilogue.kind == ir::GemmEpilogueKind::kNone &&
        n->attrs().GetBool(ir::AttrKey::kTransposeA)) {
      auto it = uses.find(n->inputs()[0]);
      for (const Node* u :
           it != uses.end() ? it->second : std::vector<Node*>{}) {
        if (IsOp(u, OpId::kSum) &&
            u->attrs().GetInts(ir::AttrKey::kDims) == std::vector<int64_t>{0}) {
          epilogue = ir::GemmEpilogue::Bgrad();
        }
      }
    }
    if (epilogue.kind != ir::GemmEpilogueKind::kNone &&
        !(ir::GemmEpilogueOf(n->attrs()) == epilogue)) {
      n->mutable_attrs().Set(ir::AttrKey::kEpilogue,
                             ir::GemmEpilogueText(epilogue));
      ++marked;
    }
  }
  return marked;
}

int AbsorbGemmEpilogues(ir::Graph& g) {
  std::vector<Node*> matmuls;
  for (const auto& n : g.nodes()) {
    if (IsOp(n.get(), OpId::kMatmul)) matmuls.push_back(n.get());
  }
  int absorbed = 0;
  for (Node* mm : matmuls) {
    if (std::optional<Match> m = FindAbsorbable(g, mm)) {
      Absorb(g, *m);
      ++absorbed;
    }
  }
  return absorbed;
}

}  // namespace stepjit::passes
