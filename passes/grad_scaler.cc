// grad-scaler: scaled seed, unscaled gradients, found_inf, predicated
// write-backs, scale update.
#include "passes/grad_scaler.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/infer.h"
#include "ir/rewrite.h"
#include "ir/status.h"
#include "passes/ir_names.h"

namespace stepjit::passes {

using amp_graph::Builder;
using amp_graph::GradientRoots;
using amp_graph::GradSeeds;
using amp_graph::IsExactWidening;
using amp_graph::RequireUnfused;

GradScalerPassConfig GradScalerPassConfig::From(const PassOptions& options) {
  return {.init_scale = options.Double("init_scale"),
          .growth_factor = options.Double("growth_factor"),
          .backoff_factor = options.Double("backoff_factor"),
          .growth_interval = options.Int("growth_interval"),
          .world_size = options.Int("world_size")};
}

std::string GradScalerPassConfig::PipelineEntry() const {
  return FormatPassEntry("grad-scaler", {{"init_scale", init_scale},
                                         {"growth_factor", growth_factor},
                                         {"backoff_factor", backoff_factor},
                                         {"growth_interval", growth_interval},
                                         {"world_size", world_size}});
}

std::vector<StateParam> GradScalerState(const PassOptions& options) {
  const ir::TensorType scalar{DType::kF32, {}};
  return {{kAmpScaleParam, scalar, options.Double("init_scale")},
          {kAmpGrowthParam, scalar, 0.0},
          {kAmpSkippedParam, scalar, 0.0}};
}

namespace {

absl::Status CheckConfig(const GradScalerPassConfig& cfg) {
  auto bad = [](absl::string_view option, auto value,
                absl::string_view expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "option '", option, "' = ", value, ": expected ", expected));
  };
  if (!(cfg.init_scale > 0.0)) return bad("init_scale", cfg.init_scale, "> 0");
  if (!(cfg.growth_factor > 1.0)) {
    return bad("growth_factor", cfg.growth_factor, "> 1");
  }
  if (!(cfg.backoff_factor > 0.0 && cfg.backoff_factor < 1.0)) {
    return bad("backoff_factor", cfg.backoff_factor, "in (0, 1)");
  }
  if (cfg.growth_interval < 1) {
    return bad("growth_interval", cfg.growth_interval, ">= 1");
  }
  if (cfg.world_size < 1) return bad("world_size", cfg.world_size, ">= 1");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> InsertGradScaler(ir::Graph& g, PassStats& stats) {
  return InsertGradScalerWith(g, PassOptions(kGradScalerOptions), stats);
}

absl::StatusOr<bool> InsertGradScalerWith(ir::Graph& g,
                                          const PassOptions& options,
                                          PassStats& stats) {
  const GradScalerPassConfig cfg = GradScalerPassConfig::From(options);
  RETURN_IF_ERROR(CheckConfig(cfg));
  RETURN_IF_ERROR(RequireUnfused(g, "grad-scaler"));
  for (const Value* p : g.params()) {
    if (p->name() == kAmpScaleParam) {
      return absl::FailedPreconditionError(
          "grad-scaler: the graph already has %amp_scale");
    }
  }
  const std::vector<const Node*> seeds = GradSeeds(g);
  if (seeds.empty()) {
    return absl::FailedPreconditionError(
        "grad-scaler: the step calls no backward() (no node has role = "
        "\"grad_seed\"); loss "
        "scaling needs the traced gradient seed");
  }
  // A second backward() accumulates into .grad in place, after the first
  // gradient was unscaled (and checked for inf): its part would stay
  // scaled, or unscaled and unchecked.
  if (seeds.size() > 1) {
    return absl::UnimplementedError(
        absl::StrCat("grad-scaler: the step calls backward() ", seeds.size(),
                     " times; loss scaling of gradients accumulated within one "
                     "step is not supported"));
  }
  const Node* seed = seeds.front();
  const absl::flat_hash_set<const Value*> grads = GradientRoots(g);
  if (grads.empty()) {
    return absl::FailedPreconditionError(
        "grad-scaler: no returned value depends on the gradient seed, so there "
        "are no gradients "
        "to unscale (the step must leave .grad bound)");
  }
  std::vector<Node*> original;
  size_t seed_pos = 0;
  for (const auto& n : g.nodes()) {
    if (n.get() == seed) seed_pos = original.size();
    original.push_back(n.get());
  }
  std::vector<Value*> added;
  for (const StateParam& p : GradScalerState(options)) {
    added.push_back(g.AddParam(p.name, p.type, ir::ParamKind::kState));
  }
  Value* scale = added[0];
  Value* growth = added[1];
  Value* skipped = added[2];

  std::vector<Node*> order;
  Builder b(g, order);
  ir::ValueReplacer replace;
  Value* inv = nullptr;
  Value* found = nullptr;
  int64_t unscaled = 0, predicated = 0;
  for (size_t i = 0; i < original.size(); ++i) {
    Node* n = original[i];
    replace.ApplyTo(*n);
    if (n->kind() == NodeKind::kAssign) continue;  // placed last, predicated
    order.push_back(n);
    if (i == seed_pos) {
      ASSIGN_OR_RETURN(Value * scaled, b.Op(OpId::kMul, {n->output(), scale}));
      replace.Replace(n->output(), scaled);
      ASSIGN_OR_RETURN(inv, b.Op(OpId::kReciprocal, {scale}));
      continue;
    }
    for (Value* out : n->outputs()) {
      if (!grads.contains(out)) continue;
      // Unscaled once, where the gradient is computed: every reader of
      // .grad (clip_grad_norm_, the optimizer, the return) sees g / scale.
      ASSIGN_OR_RETURN(Value * g_unscaled, b.Op(OpId::kMul, {out, inv}));
      replace.Replace(out, g_unscaled);
      // found_inf reads the scaled grad (finite exactly when the unscaled
      // one is), so the optimizer's region, which absorbs the unscaling,
      // does not feed the flag that predicates its own update: the
      // where() then fuses into that region.
      // A widening cast (autocast's f16 -> f32 grad) keeps finiteness: read
      // its source, so that the check does not share a producer with (and
      // fuse into) the optimizer's region.
      Value* checked = out;
      if (const Node* p = checked->producer();
          p != nullptr && p->kind() == NodeKind::kOp &&
          p->op() == OpId::kCast &&
          IsExactWidening(p->inputs()[0]->type().dtype,
                          checked->type().dtype)) {
        checked = p->inputs()[0];
      }
      ASSIGN_OR_RETURN(Value * zero, b.Const(0.0, DType::kF32));
      ASSIGN_OR_RETURN(Value * times0, b.Op(OpId::kMul, {checked, zero}));
      ASSIGN_OR_RETURN(Value * s,
                       b.Op(OpId::kSum, {times0},
                            {{AttrKey::kDims, std::vector<int64_t>{}},
                             {AttrKey::kKeepdim, false}}));
      ASSIGN_OR_RETURN(Value * nan, b.Op(OpId::kNe, {s, s}));
      ASSIGN_OR_RETURN(Value * flag, b.Cast(nan, DType::kF32));
      if (found == nullptr) {
        found = flag;
      } else {
        ASSIGN_OR_RETURN(found, b.Op(OpId::kMaximum, {found, flag}));
      }
      ++unscaled;
    }
  }
  if (cfg.world_size > 1) {
    // Every rank must skip the same steps, whatever its own gradients saw.
    ASSIGN_OR_RETURN(found, b.Op(OpId::kAllReduce, {found},
                                 {{AttrKey::kReduceOp, std::string("max")}}));
  }
  ASSIGN_OR_RETURN(Value * zero, b.Const(0.0, DType::kF32));
  ASSIGN_OR_RETURN(Value * skip, b.Op(OpId::kGt, {found, zero}));
  // State write-backs of the optimizer (after the seed) keep the old value
  // on a skipped step; earlier ones (e.g. forward running statistics) stand.
  absl::flat_hash_map<const Node*, size_t> position;
  for (size_t i = 0; i < original.size(); ++i) position[original[i]] = i;
  std::vector<Node*> assigns;
  for (Node* n : original) {
    if (n->kind() != NodeKind::kAssign) continue;
    Value* state = n->inputs()[0];
    Value* v = n->inputs()[1];
    const Node* p = v->producer();
    if (v != state && p != nullptr && position.contains(p) &&
        position.at(p) > seed_pos) {
      ASSIGN_OR_RETURN(Value * kept, b.Op(OpId::kWhere, {skip, state, v}));
      n->ReplaceInput(1, kept);
      ++predicated;
    }
    assigns.push_back(n);
  }
  // GradScaler::update.
  ASSIGN_OR_RETURN(Value * one, b.Const(1.0, DType::kF32));
  ASSIGN_OR_RETURN(Value * next, b.Op(OpId::kAdd, {growth, one}));
  ASSIGN_OR_RETURN(Value * tracker, b.Op(OpId::kWhere, {skip, zero, next}));
  ASSIGN_OR_RETURN(
      Value * interval,
      b.Const(static_cast<double>(cfg.growth_interval), DType::kF32));
  ASSIGN_OR_RETURN(Value * grow, b.Op(OpId::kGe, {tracker, interval}));
  ASSIGN_OR_RETURN(Value * gf, b.Const(cfg.growth_factor, DType::kF32));
  ASSIGN_OR_RETURN(Value * bf, b.Const(cfg.backoff_factor, DType::kF32));
  ASSIGN_OR_RETURN(Value * grown, b.Op(OpId::kMul, {scale, gf}));
  ASSIGN_OR_RETURN(Value * backed, b.Op(OpId::kMul, {scale, bf}));
  ASSIGN_OR_RETURN(Value * kept_or_grown,
                   b.Op(OpId::kWhere, {grow, grown, scale}));
  ASSIGN_OR_RETURN(Value * new_scale,
                   b.Op(OpId::kWhere, {skip, backed, kept_or_grown}));
  ASSIGN_OR_RETURN(Value * new_tracker,
                   b.Op(OpId::kWhere, {grow, zero, tracker}));
  ASSIGN_OR_RETURN(Value * new_skipped, b.Op(OpId::kAdd, {skipped, found}));
  for (Node* a : assigns) order.push_back(a);
  for (auto [state, v] :
       {std::pair{scale, new_scale}, std::pair{growth, new_tracker},
        std::pair{skipped, new_skipped}}) {
    order.push_back(g.AddAssign(state, v));
  }
  replace.ApplyToReturns(g);
  g.ReorderNodes(order);
  stats.Add(kGradientsUnscaled, unscaled);
  stats.Add(kStateUpdatesPredicated, predicated);
  return true;
}

}  // namespace stepjit::passes
