// Tracer: maps tensors to SSA values as ops dispatch; state, write-back and grad bindings.
#include "frontend/tracer.h"

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/generator.h"

namespace stepjit::frontend {

using ir::AttrKey;

namespace {
ir::TensorType TypeOf(const Tensor& t) { return {t.dtype(), t.shape()}; }
}  // namespace

Tracer::Tracer(std::string graph_name, bool remember_grads)
    : name_(std::move(graph_name)), remember_grads_(remember_grads) {}

Tracer::~Tracer() {
  if (active_) runtime::SetDispatchObserver(previous_);
}

void Tracer::Begin(absl::Span<const Tensor> inputs) {
  graph_ = std::make_unique<ir::Graph>(name_);
  for (size_t i = 0; i < inputs.size(); ++i) {
    SJ_REQUIRE(inputs[i].defined(), "compile: step argument ", i, " is an undefined tensor");
    ir::Value* v = graph_->AddParam(absl::StrCat("x", i), TypeOf(inputs[i]),
                                    ir::ParamKind::kInput);
    // An argument passed twice keeps its first binding.
    if (Lookup(inputs[i]) == nullptr) Bind(inputs[i], v);
  }
  previous_ = runtime::SetDispatchObserver(this);
  active_ = true;
}

ir::Value* Tracer::Lookup(const Tensor& t) {
  auto it = values_.find(t.impl());
  if (it == values_.end()) return nullptr;
  if (it->second.impl.lock().get() != t.impl()) {  // address reused
    values_.erase(it);
    return nullptr;
  }
  if (it->second.stale) {
    Break(absl::StrCat("a ", ir::DTypeName(t.dtype()), ir::ShapeToString(t.shape()),
                       " tensor is read after an in-place op wrote its storage through "
                       "another view (op #", num_ops_, " ", last_op_,
                       "); the tracer does not model aliasing writes"));
  }
  return it->second.value;
}

void Tracer::Bind(const Tensor& t, ir::Value* value) {
  values_[t.impl()] = Entry{t.impl_ptr(), value};
  by_storage_[t.storage().get()].push_back(t.impl());
}

ir::Value* Tracer::ValueOf(const Tensor& t) {
  if (ir::Value* v = Lookup(t)) return v;
  ir::Value* v = graph_->AddParam(absl::StrCat("s", state_.size()), TypeOf(t),
                                  ir::ParamKind::kState);
  Bind(t, v);
  state_params_[t.impl()] = v;
  state_.push_back(t);  // state is bound by identity: keep it
  return v;
}

void Tracer::Break(std::string reason) {
  if (break_reason_.empty()) break_reason_ = std::move(reason);
}

void Tracer::OnOp(ir::OpId op, absl::Span<const Tensor> inputs, const ir::Attrs& attrs,
                  const Tensor& output) {
  if (!break_reason_.empty()) return;
  if (ir::GetOpInfo(op).kind == ir::OpKind::kRandom &&
      static_cast<uint64_t>(attrs.GetInt(AttrKey::kSeed)) != default_generator().seed()) {
    Break(absl::StrCat(ir::OpName(op), " draws from a generator other than the default "
                       "one; replays can only advance the default generator"));
    return;
  }
  std::vector<ir::Value*> in;
  in.reserve(inputs.size());
  for (const Tensor& t : inputs) in.push_back(ValueOf(t));
  ir::Node* node = graph_->AddOp(op, std::move(in), attrs, TypeOf(output));
  // In-place ops return their target: the target's tensor now holds the
  // node's new value, and every other tensor on that storage is stale.
  if (ir::IsInplace(op)) {
    for (const TensorImpl* other : by_storage_[output.storage().get()]) {
      auto it = values_.find(other);
      if (other != output.impl() && it != values_.end()) it->second.stale = true;
    }
  }
  Bind(output, node->output());
  last_op_ = std::string(ir::OpName(op));
  ++num_ops_;
}

void Tracer::OnHostRead(const Tensor& tensor, const char* what) {
  Break(absl::StrCat(what, " reads ", ir::DTypeName(tensor.dtype()),
                     ir::ShapeToString(tensor.shape()), " to the host after op #", num_ops_,
                     last_op_.empty() ? "" : absl::StrCat(" (", last_op_, ")"),
                     "; a host read inside the step is a graph break"));
}

void Tracer::OnAlias(const Tensor& source, const Tensor& alias) {
  // An alias of a tensor the step has not seen yet stays unmapped: if the
  // step reads it, it becomes state like any outside tensor.
  ir::Value* v = Lookup(source);
  if (v == nullptr) {
    values_.erase(alias.impl());
    return;
  }
  Bind(alias, v);
}

void Tracer::OnGradRead(const Tensor& leaf, const Tensor& grad) {
  if (!grad_seen_.insert(leaf.impl()).second) return;
  grad_touched_.push_back(leaf);
  grad_guards_.push_back({leaf, grad.defined() ? grad.impl_ptr() : nullptr});
  if (remember_grads_) {
    grad_before_.push_back({leaf, grad});
  }
}

void Tracer::OnGradSet(const Tensor& leaf, const Tensor& grad) {
  grad_set_.insert(leaf.impl());
  // Set before any read: the binding before the step does not matter to the
  // graph (only to a re-trace that must put it back).
  if (!grad_seen_.insert(leaf.impl()).second) return;
  grad_touched_.push_back(leaf);
  if (remember_grads_) {
    // Read without leaf.grad(), which would report a read to this tracer.
    const AutogradMeta* meta = leaf.impl()->autograd.get();
    grad_before_.push_back(
        {leaf, meta != nullptr && meta->grad ? *meta->grad : Tensor()});
  }
}

void Tracer::OnFlagRead(const std::shared_ptr<const bool>& flag, const char* what) {
  for (const FlagGuard& g : flag_guards_) {
    if (g.flag == flag) return;
  }
  flag_guards_.push_back({flag, *flag, what});
}

Trace Tracer::End(absl::Span<const Tensor> outputs) {
  runtime::SetDispatchObserver(previous_);
  active_ = false;
  Trace trace;
  trace.num_ops = num_ops_;
  trace.break_reason = break_reason_;
  trace.flag_guards = flag_guards_;
  trace.grad_before = grad_before_;
  if (!break_reason_.empty()) return trace;
  std::vector<ir::Value*> returns;
  for (const Tensor& t : outputs) returns.push_back(ValueOf(t));
  trace.num_outputs = static_cast<int>(returns.size());
  // Final .grad bindings (read them before emitting assigns: a binding to a
  // tensor never seen by an op makes it state).
  for (const Tensor& leaf : grad_touched_) {
    // A .grad that was only read (and maybe updated in place) keeps its
    // tensor; its contents come back through the state write-back.
    if (!grad_set_.contains(leaf.impl())) continue;
    Tensor g;
    if (leaf.impl()->autograd && leaf.impl()->autograd->grad) g = *leaf.impl()->autograd->grad;
    int index = -1;
    if (g.defined()) {
      index = static_cast<int>(returns.size());
      returns.push_back(ValueOf(g));
    }
    trace.grad_bindings.push_back({leaf, index});
  }
  // Write-back: state whose tensor now holds a newer value.
  for (const Tensor& s : state_) {
    ir::Value* param = state_params_.at(s.impl());
    ir::Value* latest = Lookup(s);
    if (latest != param) graph_->AddAssign(param, latest);
  }
  graph_->SetReturns(std::move(returns));
  trace.graph = std::move(graph_);
  trace.state = state_;
  trace.grad_guards = grad_guards_;
  return trace;
}

std::pair<std::unique_ptr<ir::Graph>, std::vector<Tensor>> Tracer::TakePartial() {
  return {std::move(graph_), state_};
}

std::vector<Tracer::Kept> Tracer::KeptMetaTensors() const {
  std::vector<Kept> kept;
  for (const auto& [impl, entry] : values_) {
    std::shared_ptr<TensorImpl> alive = entry.impl.lock();
    if (alive == nullptr || alive.get() != impl || !alive->storage->is_meta())
      continue;
    kept.push_back({Tensor(std::move(alive)), entry.stale ? nullptr : entry.value});
  }
  return kept;
}

}  // namespace stepjit::frontend
