// The test-only miscompile: a copy of a region's body with one op replaced,
// for lowering only.
#include "testing/miscompile_region.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "codegen/region_plan.h"
#include "ir/status.h"
#include "program/region_override.h"

namespace stepjit::runtime {

struct ScopedMiscompileRegion::State {
  std::string region;
  ir::OpId from, to;
  mutable std::mutex mu;
  std::vector<std::string> hits;
};

namespace {

std::atomic<ScopedMiscompileRegion::State*> g_active{nullptr};

// The body the active ScopedMiscompileRegion wants `region` (a fusion node
// of the top-level `graph`) lowered from, or nullptr when none is alive or
// it targets another region (the library's RegionBodyOverride).
std::unique_ptr<ir::Graph> MiscompiledBody(const ir::Graph& graph,
                                           const ir::Node& region);

bool HoldsOp(const ir::Graph& body, ir::OpId op) {
  return std::any_of(body.nodes().begin(), body.nodes().end(),
                     [&](const auto& n) {
                       return n->kind() == ir::NodeKind::kOp && n->op() == op;
                     });
}

bool IsTarget(const ir::Graph& graph, const ir::Node& region,
              const ScopedMiscompileRegion::State& s) {
  if (!HoldsOp(*region.body(), s.from)) return false;
  if (!s.region.empty()) return region.body()->name() == s.region;
  // Unnamed: the first candidate a code generator lowers. A region that runs
  // interpreted (softmax, losses) would make the miscompile a no-op.
  for (const auto& n : graph.nodes()) {
    if (n->kind() == ir::NodeKind::kFusion && HoldsOp(*n->body(), s.from) &&
        codegen::Analyze(*n->body()).ok())
      return n.get() == &region;
  }
  return false;
}

// `body` with its first `from` op replaced by `to` (same operands, attributes
// and result types); nullptr when the body holds anything but ops, which no
// backend lowers anyway.
std::unique_ptr<ir::Graph> Substituted(const ir::Graph& body, ir::OpId from,
                                       ir::OpId to) {
  auto out = std::make_unique<ir::Graph>(body.name());
  absl::flat_hash_map<const ir::Value*, ir::Value*> map;
  for (const ir::Value* p : body.params()) {
    map[p] = out->AddParam(p->name(), p->type(), body.param_kind(p));
  }
  bool replaced = false;
  for (const auto& n : body.nodes()) {
    if (n->kind() != ir::NodeKind::kOp) return nullptr;
    std::vector<ir::Value*> inputs;
    for (const ir::Value* v : n->inputs()) inputs.push_back(map.at(v));
    std::vector<ir::TensorType> types;
    for (const ir::Value* v : n->outputs()) types.push_back(v->type());
    ir::OpId op = n->op();
    if (!replaced && op == from) {
      op = to;
      replaced = true;
    }
    const ir::Node* copy =
        out->AddOp(op, std::move(inputs), n->attrs(), std::move(types));
    for (size_t i = 0; i < n->outputs().size(); ++i)
      map[n->outputs()[i]] = copy->outputs()[i];
  }
  std::vector<ir::Value*> returns;
  for (const ir::Value* r : body.returns()) returns.push_back(map.at(r));
  out->SetReturns(std::move(returns));
  return out;
}

}  // namespace

ScopedMiscompileRegion::ScopedMiscompileRegion(std::string region,
                                               ir::OpId from, ir::OpId to)
    : state_(std::make_unique<State>()) {
  const ir::OpInfo &a = ir::GetOpInfo(from), &b = ir::GetOpInfo(to);
  SJ_CHECK(a.min_arity == b.min_arity && a.max_arity == b.max_arity,
           "ScopedMiscompileRegion: ", a.name, " and ", b.name,
           " take different numbers of operands");
  state_->region = std::move(region);
  state_->from = from;
  state_->to = to;
  State* expected = nullptr;
  SJ_CHECK(g_active.compare_exchange_strong(expected, state_.get()),
           "ScopedMiscompileRegion: another one is alive");
  SetRegionBodyOverride(&MiscompiledBody);
}

ScopedMiscompileRegion::~ScopedMiscompileRegion() {
  SetRegionBodyOverride(nullptr);
  g_active.store(nullptr);
}

std::vector<std::string> ScopedMiscompileRegion::miscompiled() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->hits;
}

namespace {
std::unique_ptr<ir::Graph> MiscompiledBody(const ir::Graph& graph,
                                           const ir::Node& region) {
  ScopedMiscompileRegion::State* s = g_active.load(std::memory_order_acquire);
  if (s == nullptr || !IsTarget(graph, region, *s)) return nullptr;
  std::unique_ptr<ir::Graph> body = Substituted(*region.body(), s->from, s->to);
  if (body != nullptr) {
    std::lock_guard<std::mutex> lock(s->mu);
    if (std::find(s->hits.begin(), s->hits.end(), body->name()) ==
        s->hits.end()) {
      s->hits.push_back(body->name());
    }
  }
  return body;
}
}  // namespace

}  // namespace stepjit::runtime
