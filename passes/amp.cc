// autocast-* and grad-scaler: mixed precision inserted into traced graphs.
#include "passes/amp.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/infer.h"
#include "ir/status.h"

namespace stepjit::passes {

using ir::AttrKey;
using ir::DType;
using ir::Node;
using ir::NodeKind;
using ir::OpId;
using ir::TensorType;
using ir::Value;

namespace {

thread_local GradScalerPassConfig t_scaler_config;

// Appends nodes at the end of the graph and remembers them for a final order.
class Builder {
 public:
  Builder(ir::Graph& g, std::vector<Node*>& order) : g_(g), order_(order) {}

  absl::StatusOr<Value*> Op(OpId op, std::vector<Value*> in, ir::Attrs attrs = {}) {
    std::vector<TensorType> types;
    for (const Value* v : in) types.push_back(v->type());
    ASSIGN_OR_RETURN(TensorType t, ir::InferType(op, types, attrs));
    Node* n = g_.AddOp(op, std::move(in), std::move(attrs), t);
    order_.push_back(n);
    return n->output();
  }
  absl::StatusOr<Value*> Const(double value, DType dtype) {
    return Op(OpId::kFull, {},
              {{AttrKey::kShape, std::vector<int64_t>{}}, {AttrKey::kValue, value},
               {AttrKey::kDTypeAttr, dtype}});
  }
  absl::StatusOr<Value*> Cast(Value* v, DType to) {
    return Op(OpId::kCast, {v}, {{AttrKey::kDTypeAttr, to}});
  }

 private:
  ir::Graph& g_;
  std::vector<Node*>& order_;
};

// A cast from f16/bf16 to f32/f64: exact, and finite exactly when its input is.
bool IsExactWidening(DType from, DType to) {
  return (from == DType::kF16 || from == DType::kBF16) && (to == DType::kF32 || to == DType::kF64);
}

// The gradient seeds of the step's backward() calls, in order.
std::vector<const Node*> GradSeeds(const ir::Graph& g) {
  std::vector<const Node*> seeds;
  for (const auto& n : g.nodes()) {
    if (n->kind() == NodeKind::kOp && n->op() == OpId::kFull &&
        n->attrs().GetString(AttrKey::kRole) == kGradSeedRole) {
      seeds.push_back(n.get());
    }
  }
  return seeds;
}

// The gradients backward() bound to leaves' .grad, as the values that
// computed them. The tracer returns every rebound .grad; a returned value
// that depends on a seed, followed back through the in-place ops that
// updated it (clip_grad_norm_'s mul_), leads to the op that produced it.
// Everything that reads .grad (clipping, the optimizer, the return) reads
// that value or a later version of it. A value computed from gradients
// (clip_grad_norm_'s total norm, returned) is not itself one, nor is a seed
// (backward() on a leaf binds it as the leaf's .grad).
absl::flat_hash_set<const Value*> GradientRoots(const ir::Graph& g) {
  absl::flat_hash_set<const Value*> seeds;
  for (const Node* seed : GradSeeds(g)) seeds.insert(seed->output());
  if (seeds.empty()) return {};
  absl::flat_hash_set<const Value*> tainted = seeds;
  for (const auto& n : g.nodes()) {
    for (const Value* v : n->inputs()) {
      if (tainted.contains(v)) {
        tainted.insert(n->outputs().begin(), n->outputs().end());
        break;
      }
    }
  }
  absl::flat_hash_set<const Value*> roots;
  for (const Value* r : g.returns()) {
    const Value* v = r;
    for (const Node* p = v->producer(); p != nullptr && p->kind() == NodeKind::kOp &&
                                        ir::IsInplace(p->op());
         p = v->producer()) {
      v = p->inputs()[0];
    }
    if (v->producer() != nullptr && tainted.contains(v) && !seeds.contains(v)) roots.insert(v);
  }
  absl::flat_hash_set<const Value*> from_roots, gradients;
  for (const auto& n : g.nodes()) {
    bool reads_root = false;
    for (const Value* v : n->inputs()) reads_root |= roots.contains(v) || from_roots.contains(v);
    for (const Value* out : n->outputs()) {
      if (reads_root) from_roots.insert(out);
      else if (roots.contains(out)) gradients.insert(out);
    }
  }
  return gradients;
}

absl::Status RequireUnfused(const ir::Graph& g, absl::string_view pass) {
  for (const auto& n : g.nodes()) {
    if (n->kind() == NodeKind::kFusion) {
      return absl::FailedPreconditionError(
          absl::StrCat(pass, " runs on traced graphs, before fuse; @", g.name(),
                       " has fusion regions"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> AutocastGraph(ir::Graph& g, DType low, PassStats& stats) {
  RETURN_IF_ERROR(RequireUnfused(g, "autocast"));
  absl::flat_hash_map<const Value*, DType> traced;
  for (const Value* p : g.params()) traced[p] = p->type().dtype;
  std::vector<Node*> original;
  for (const auto& n : g.nodes()) {
    original.push_back(n.get());
    for (const Value* v : n->outputs()) traced[v] = v->type().dtype;
  }
  std::vector<Node*> order, assigns;  // assigns stay last
  Builder b(g, order);
  absl::flat_hash_map<std::pair<Value*, DType>, Value*> casts;
  int64_t inserted = 0, retyped = 0;
  auto cast = [&](Value* v, DType to) -> absl::StatusOr<Value*> {
    auto key = std::make_pair(v, to);
    if (auto it = casts.find(key); it != casts.end()) return it->second;
    ASSIGN_OR_RETURN(Value * c, b.Cast(v, to));
    ++inserted;
    casts[key] = c;
    return c;
  };
  // A gradient keeps its leaf's dtype, as the backward of eager autocast's
  // cast gives it: where its low-precision producer computes it, it is cast
  // back, and every use (the returned .grad, clip_grad_norm_, the
  // optimizer) reads that copy, so their math runs in f32.
  const absl::flat_hash_set<const Value*> gradients = GradientRoots(g);
  ValueReplacer restored;
  for (Node* n : original) {
    restored.ApplyTo(*n);
    if (n->kind() == NodeKind::kAssign) {
      Value* state = n->inputs()[0];
      Value* v = n->inputs()[1];
      if (v->type().dtype != state->type().dtype) {
        ASSIGN_OR_RETURN(Value * c, cast(v, state->type().dtype));
        n->ReplaceInput(1, c);
      }
      assigns.push_back(n);
      continue;
    }
    const ir::AmpPolicy policy = ir::GetOpInfo(n->op()).amp;
    if (policy == ir::AmpPolicy::kLower || policy == ir::AmpPolicy::kFp32) {
      const DType target = policy == ir::AmpPolicy::kLower ? low : DType::kF32;
      for (size_t i = 0; i < n->inputs().size(); ++i) {
        Value* v = n->inputs()[i];
        const DType t = v->type().dtype;
        if (ir::IsFloating(t) && t != DType::kF64 && t != target) {
          ASSIGN_OR_RETURN(Value * c, cast(v, target));
          n->ReplaceInput(static_cast<int>(i), c);
        }
      }
    }
    std::vector<TensorType> types;
    for (const Value* v : n->inputs()) types.push_back(v->type());
    absl::StatusOr<TensorType> out = ir::InferType(n->op(), types, n->attrs());
    if (!out.ok()) {
      return absl::InternalError(absl::StrCat("autocast: re-inferring ", ir::OpName(n->op()),
                                              " failed: ", out.status().message()));
    }
    if (!(*out == n->output()->type())) {
      n->output()->set_type(*out);
      ++retyped;
    }
    order.push_back(n);
    for (Value* v : n->outputs()) {
      const DType now = v->type().dtype, was = traced.at(v);
      if (!gradients.contains(v) || now == was) continue;
      ASSIGN_OR_RETURN(Value * copy, cast(v, was));
      restored.Replace(v, copy);
      // A matmul reading the copy reads `v` itself: narrowing undoes the cast.
      if (IsExactWidening(now, was)) casts[std::make_pair(copy, now)] = v;
    }
  }
  restored.ApplyToReturns(g);
  // The step's other results (the loss) keep the dtypes the f32 step had.
  std::vector<Value*> rets = g.returns();
  for (Value*& r : rets) {
    auto it = traced.find(r);
    if (it != traced.end() && r->type().dtype != it->second) {
      ASSIGN_OR_RETURN(r, cast(r, it->second));
    }
  }
  g.SetReturns(std::move(rets));
  order.insert(order.end(), assigns.begin(), assigns.end());
  g.ReorderNodes(order);
  stats.Add("casts inserted", inserted);
  stats.Add("values retyped", retyped);
  return inserted > 0;
}

absl::StatusOr<bool> AutocastBf16(ir::Graph& g, PassStats& stats) {
  return AutocastGraph(g, DType::kBF16, stats);
}
absl::StatusOr<bool> AutocastF16(ir::Graph& g, PassStats& stats) {
  return AutocastGraph(g, DType::kF16, stats);
}

ScopedGradScalerConfig::ScopedGradScalerConfig(GradScalerPassConfig config)
    : prev_(t_scaler_config) {
  t_scaler_config = config;
}
ScopedGradScalerConfig::~ScopedGradScalerConfig() { t_scaler_config = prev_; }

absl::StatusOr<bool> InsertGradScaler(ir::Graph& g, PassStats& stats) {
  RETURN_IF_ERROR(RequireUnfused(g, "grad-scaler"));
  for (const Value* p : g.params()) {
    if (p->name() == kAmpScaleParam) {
      return absl::FailedPreconditionError("grad-scaler: the graph already has %amp_scale");
    }
  }
  const std::vector<const Node*> seeds = GradSeeds(g);
  if (seeds.empty()) {
    return absl::FailedPreconditionError(
        "grad-scaler: the step calls no backward() (no node has role = \"grad_seed\"); loss "
        "scaling needs the traced gradient seed");
  }
  // A second backward() accumulates into .grad in place, after the first
  // gradient was unscaled (and checked for inf): its part would stay
  // scaled, or unscaled and unchecked.
  if (seeds.size() > 1) {
    return absl::UnimplementedError(absl::StrCat(
        "grad-scaler: the step calls backward() ", seeds.size(),
        " times; loss scaling of gradients accumulated within one step is not supported"));
  }
  const Node* seed = seeds.front();
  const absl::flat_hash_set<const Value*> grads = GradientRoots(g);
  if (grads.empty()) {
    return absl::FailedPreconditionError(
        "grad-scaler: no returned value depends on the gradient seed, so there are no gradients "
        "to unscale (the step must leave .grad bound)");
  }
  std::vector<Node*> original;
  size_t seed_pos = 0;
  for (const auto& n : g.nodes()) {
    if (n.get() == seed) seed_pos = original.size();
    original.push_back(n.get());
  }
  const GradScalerPassConfig cfg = t_scaler_config;
  Value* scale = g.AddParam(kAmpScaleParam, {DType::kF32, {}}, ir::ParamKind::kState);
  Value* growth = g.AddParam(kAmpGrowthParam, {DType::kF32, {}}, ir::ParamKind::kState);
  Value* skipped = g.AddParam(kAmpSkippedParam, {DType::kF32, {}}, ir::ParamKind::kState);

  std::vector<Node*> order;
  Builder b(g, order);
  ValueReplacer replace;
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
      if (const Node* p = checked->producer(); p != nullptr && p->kind() == NodeKind::kOp &&
                                                p->op() == OpId::kCast &&
                                                IsExactWidening(p->inputs()[0]->type().dtype,
                                                                checked->type().dtype)) {
        checked = p->inputs()[0];
      }
      ASSIGN_OR_RETURN(Value * zero, b.Const(0.0, DType::kF32));
      ASSIGN_OR_RETURN(Value * times0, b.Op(OpId::kMul, {checked, zero}));
      ASSIGN_OR_RETURN(Value * s, b.Op(OpId::kSum, {times0}, {{AttrKey::kDims, std::vector<int64_t>{}},
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
    if (v != state && p != nullptr && position.contains(p) && position.at(p) > seed_pos) {
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
  ASSIGN_OR_RETURN(Value * interval, b.Const(static_cast<double>(cfg.growth_interval), DType::kF32));
  ASSIGN_OR_RETURN(Value * grow, b.Op(OpId::kGe, {tracker, interval}));
  ASSIGN_OR_RETURN(Value * gf, b.Const(cfg.growth_factor, DType::kF32));
  ASSIGN_OR_RETURN(Value * bf, b.Const(cfg.backoff_factor, DType::kF32));
  ASSIGN_OR_RETURN(Value * grown, b.Op(OpId::kMul, {scale, gf}));
  ASSIGN_OR_RETURN(Value * backed, b.Op(OpId::kMul, {scale, bf}));
  ASSIGN_OR_RETURN(Value * kept_or_grown, b.Op(OpId::kWhere, {grow, grown, scale}));
  ASSIGN_OR_RETURN(Value * new_scale, b.Op(OpId::kWhere, {skip, backed, kept_or_grown}));
  ASSIGN_OR_RETURN(Value * new_tracker, b.Op(OpId::kWhere, {grow, zero, tracker}));
  ASSIGN_OR_RETURN(Value * new_skipped, b.Op(OpId::kAdd, {skipped, found}));
  for (Node* a : assigns) order.push_back(a);
  for (auto [state, v] : {std::pair{scale, new_scale}, std::pair{growth, new_tracker},
                          std::pair{skipped, new_skipped}}) {
    order.push_back(g.AddAssign(state, v));
  }
  replace.ApplyToReturns(g);
  g.ReorderNodes(order);
  stats.Add("gradients unscaled", unscaled);
  stats.Add("state updates predicated", predicated);
  return true;
}

}  // namespace stepjit::passes
