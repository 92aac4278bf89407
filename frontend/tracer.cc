// Tracer: maps tensors to record operands as ops dispatch; state, write-back,
// grad bindings, and the check against an expected record.
#include "frontend/tracer.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/generator.h"

namespace stepjit::frontend {

using ir::AttrKey;

namespace {
ir::TensorType TypeOf(const TensorImpl& t) { return {t.dtype, t.shape}; }
ir::TensorType TypeOf(const Tensor& t) { return TypeOf(*t.impl()); }
std::atomic<uint64_t> g_next_epoch{1};
}  // namespace

void FillRecord(Trace& trace, const TraceRecord& expected) {
  if (trace.unfilled_params > 0) {
    std::vector<TraceRecord::Param> params(
        expected.params.begin(),
        expected.params.begin() + trace.unfilled_params);
    std::move(trace.record.params.begin(), trace.record.params.end(),
              std::back_inserter(params));
    trace.record.params = std::move(params);
    trace.unfilled_params = 0;
  }
  if (trace.unfilled == 0) return;
  std::vector<TraceRecord::Node> nodes(expected.nodes.begin(),
                                       expected.nodes.begin() + trace.unfilled);
  for (auto& [index, attrs] : trace.unfilled_live)
    nodes[index].attrs = std::move(attrs);
  std::move(trace.record.nodes.begin(), trace.record.nodes.end(),
            std::back_inserter(nodes));
  trace.record.nodes = std::move(nodes);
  // The routines of the matched prefix are the expected record's (a
  // matching call stores none), then those recorded after it, by begin.
  std::vector<TraceRecord::Routine> routines;
  for (const TraceRecord::Routine& r : expected.routines) {
    if (r.end <= trace.unfilled) routines.push_back(r);
  }
  std::move(trace.record.routines.begin(), trace.record.routines.end(),
            std::back_inserter(routines));
  std::stable_sort(
      routines.begin(), routines.end(),
      [](const TraceRecord::Routine& a, const TraceRecord::Routine& b) {
        return a.begin < b.begin;
      });
  trace.record.routines = std::move(routines);
  trace.unfilled = 0;
  trace.unfilled_live.clear();
}

void FillState(Trace& trace) {
  if (trace.borrowed_state == 0) return;
  trace.state.insert(trace.state.begin(), trace.borrowed_from.begin(),
                     trace.borrowed_from.begin() + trace.borrowed_state);
  trace.borrowed_state = 0;
  trace.borrowed_from = {};
}

Tracer::Tracer(std::string graph_name, bool remember_grads,
               const TraceRecord* expected,
               absl::Span<const Tensor> expected_state)
    : name_(std::move(graph_name)),
      remember_grads_(remember_grads),
      expected_(expected),
      matching_(expected != nullptr),
      epoch_(g_next_epoch.fetch_add(1, std::memory_order_relaxed)),
      expected_state_(expected != nullptr ? expected_state
                                          : absl::Span<const Tensor>()) {}

Tracer::~Tracer() {
  if (active_) runtime::SetDispatchObserver(previous_);
}

void Tracer::Begin(absl::Span<const Tensor> inputs) {
  if (expected_ != nullptr) {
    // What a matching call fills, sized once.
    state_params_.reserve(expected_->params.size());
    touched_.reserve(expected_->grad_bindings.size());
    record_.returns.reserve(expected_->returns.size());
    record_.grad_bindings.reserve(expected_->grad_bindings.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    SJ_REQUIRE(inputs[i].defined(), "compile: step argument ", i, " is an undefined tensor");
    const int v = AddParam(ir::ParamKind::kInput, *inputs[i].impl());
    // An argument passed twice keeps its first binding.
    if (Lookup(inputs[i]) == kNone) Bind(inputs[i], v);
  }
  generator_offset_ = default_generator().offset();
  previous_ = runtime::SetDispatchObserver(this);
  active_ = true;
}

int Tracer::AddParam(ir::ParamKind kind, const TensorImpl& t) {
  const size_t p = num_params_;
  const TensorImpl* state = kind == ir::ParamKind::kState ? &t : nullptr;
  if (matching_ && p < expected_->params.size()) {
    // As expected (the common case): counted, not copied (Diverge and
    // FillRecord copy the matched prefix), without building the type.
    const TraceRecord::Param& e = expected_->params[p];
    if (e.kind == kind && e.state == state && e.type.dtype == t.dtype &&
        e.type.shape == t.shape) {
      ++num_params_;
      return TraceRecord::ParamId(p);
    }
  }
  Diverge();
  record_.params.push_back({kind, TypeOf(t), state});
  ++num_params_;
  return TraceRecord::ParamId(p);
}

int Tracer::AddNode(ir::NodeKind kind, ir::OpId op,
                    absl::Span<const int> inputs, const ir::Attrs& attrs,
                    const ir::TensorType& type, bool attrs_checked) {
  const size_t index = next_node_++;
  int draw = -1;
  if (kind == ir::NodeKind::kOp &&
      ir::GetOpInfo(op).kind == ir::OpKind::kRandom) {
    const int64_t offset = attrs.GetInt(AttrKey::kOffset);
    // (Numbered by draw_offsets_, which a stood-in routine's draws also
    // extend.)
    const auto [it, fresh] = draw_of_offset_.try_emplace(
        offset, static_cast<int>(draw_offsets_.size()));
    if (fresh) draw_offsets_.push_back(offset);
    draw = it->second;
  }
  if (matching_) {
    const bool same =
        index < expected_->nodes.size() &&
        (attrs_checked ? expected_->nodes[index].random_draw == draw &&
                             absl::MakeConstSpan(
                                 expected_->nodes[index].inputs) == inputs &&
                             expected_->nodes[index].type == type
                       : SameNode(expected_->nodes[index], kind, op, inputs,
                                  attrs, type, draw));
    if (same) {
      if (draw >= 0 || expected_->nodes[index].lifted)
        live_.push_back({index, attrs});
      return static_cast<int>(index);
    }
    --next_node_;
    Diverge();
    ++next_node_;
  }
  record_.nodes.push_back(
      {kind, op, {inputs.begin(), inputs.end()}, attrs, type, draw});
  return static_cast<int>(index);
}

void Tracer::StopBorrowing() {
  if (borrowed_state_ == 0) {
    expected_state_ = {};
    return;
  }
  state_.insert(state_.begin(), expected_state_.begin(),
                expected_state_.begin() + borrowed_state_);
  borrowed_state_ = 0;
  expected_state_ = {};
}

void Tracer::Diverge() {
  if (!matching_) return;
  matching_ = false;
  // The trace may outlive the expected specialization: it holds its state.
  StopBorrowing();
  record_.params.assign(expected_->params.begin(),
                        expected_->params.begin() + num_params_);
  Trace partial;
  partial.unfilled = next_node_;
  partial.unfilled_live = std::move(live_);
  partial.record.routines = std::move(record_.routines);
  FillRecord(partial, *expected_);
  record_.nodes = std::move(partial.record.nodes);
  record_.routines = std::move(partial.record.routines);
}

int Tracer::Lookup(const TensorImpl& t) {
  const ObserverSlot& slot = t.observer;
  if (slot.epoch != epoch_) return kNone;
  const ObserverSlot& storage = t.storage->observer;
  if (storage.epoch == epoch_ && storage.writes != slot.writes) {
    Break(absl::StrCat(
        "a ", ir::DTypeName(t.dtype), ir::ShapeToString(t.shape),
        " tensor is read after an in-place op wrote its storage through "
        "another view (op #",
        num_ops_, " ", ir::OpName(last_op_),
        "); the tracer does not model aliasing writes"));
  }
  return slot.value;
}

void Tracer::Bind(TensorImpl& t, int value) {
  ObserverSlot& storage = t.storage->observer;
  if (storage.epoch != epoch_) storage = {epoch_, 0, 0};
  ObserverSlot& slot = t.observer;
  slot.epoch = epoch_;
  slot.value = value;
  slot.writes = storage.writes;
}

int Tracer::ValueOf(const std::shared_ptr<TensorImpl>& t) {
  if (const int v = Lookup(*t); v != kNone) return v;
  const int v = AddParam(ir::ParamKind::kState, *t);
  Bind(*t, v);
  // State is bound by identity: held, or borrowed from the expected
  // specialization while the call binds the same tensors it does.
  const size_t i = state_params_.size();
  state_params_.push_back(v);
  if (matching_ && state_.empty() && i == borrowed_state_ &&
      i < expected_state_.size() && expected_state_[i].impl() == t.get()) {
    ++borrowed_state_;
  } else {
    StopBorrowing();
    state_.emplace_back(t);
  }
  return v;
}

void Tracer::Break(std::string reason) {
  if (break_reason_.empty()) break_reason_ = std::move(reason);
}

void Tracer::OnOp(ir::OpId op, absl::Span<const Tensor> inputs, const ir::Attrs& attrs,
                  const Tensor& output) {
  if (redo_node_ >= 0) {
    // Already in the record: only what the result holds.
    Bind(output, redo_node_);
    if (output.storage()->is_meta()) made_.push_back(output.impl_ptr());
    return;
  }
  if (!break_reason_.empty()) return;
  if (ir::GetOpInfo(op).kind == ir::OpKind::kRandom &&
      static_cast<uint64_t>(attrs.GetInt(AttrKey::kSeed)) != default_generator().seed()) {
    Break(absl::StrCat(ir::OpName(op), " draws from a generator other than the default "
                       "one; replays can only advance the default generator"));
    return;
  }
  const bool attrs_checked =
      confirmed_.node == next_node_ && confirmed_.op == op &&
      confirmed_.attrs == &attrs && confirmed_.inputs == inputs.data() &&
      confirmed_.num_inputs == inputs.size();
  confirmed_ = {};
  absl::InlinedVector<int, 4> in;
  for (const Tensor& t : inputs) in.push_back(ValueOf(t));
  const int node =
      AddNode(ir::NodeKind::kOp, op, in, attrs, TypeOf(output), attrs_checked);
  // In-place ops return their target: the target's tensor now holds the
  // node's new value, and every other tensor on that storage is stale.
  if (ir::IsInplace(op)) {
    ObserverSlot& storage = output.storage()->observer;
    if (storage.epoch != epoch_) storage = {epoch_, 0, 0};
    ++storage.writes;
  }
  Bind(output, node);
  if (output.storage()->is_meta()) made_.push_back(output.impl_ptr());
  if (routine_depth_ > 0) routine_made_.push_back(output.impl_ptr());
  last_op_ = op;
  ++num_ops_;
}

const ir::TensorType* Tracer::ExpectedType(ir::OpId op,
                                           absl::Span<const Tensor> inputs,
                                           const ir::Attrs& attrs) {
  confirmed_ = {};
  if (redo_node_ >= 0 || !matching_ || !break_reason_.empty() ||
      next_node_ >= expected_->nodes.size())
    return nullptr;
  const TraceRecord::Node& node = expected_->nodes[next_node_];
  if (node.kind != ir::NodeKind::kOp || node.op != op ||
      node.inputs.size() != inputs.size())
    return nullptr;
  // Operands already matched hold values of the recorded types; one the
  // call has not seen yet (new state) is left to type inference.
  absl::InlinedVector<int, 4> in;
  for (const Tensor& t : inputs) {
    const int v = Lookup(t);
    if (v == kNone) return nullptr;
    in.push_back(v);
  }
  if (!SameNode(node, node.kind, op, in, attrs, node.type, node.random_draw))
    return nullptr;
  confirmed_ = {next_node_, op, &attrs, inputs.data(), inputs.size()};
  return &node.type;
}

void Tracer::OnHostRead(const Tensor& tensor, const char* what) {
  Break(absl::StrCat(
      what, " reads ", ir::DTypeName(tensor.dtype()),
      ir::ShapeToString(tensor.shape()), " to the host after op #", num_ops_,
      num_ops_ == 0 ? "" : absl::StrCat(" (", ir::OpName(last_op_), ")"),
      "; a host read inside the step is a graph break"));
}

void Tracer::OnAlias(const Tensor& source, const Tensor& alias) {
  // An alias of a tensor the step has not seen yet stays unmapped: if the
  // step reads it, it becomes state like any outside tensor.
  const int v = Lookup(source);
  if (v == kNone) {
    alias.impl()->observer.epoch = 0;
    return;
  }
  Bind(alias, v);
  if (alias.storage()->is_meta()) made_.push_back(alias.impl_ptr());
}

bool Tracer::MarkGrad(TensorImpl& leaf, uint32_t flags) {
  ObserverSlot& slot = leaf.observer;
  if (slot.grad_epoch != epoch_) {
    slot.grad_epoch = epoch_;
    slot.grad_flags = 0;
  }
  const bool first = (slot.grad_flags & kGradSeen) == 0;
  slot.grad_flags |= flags | kGradSeen;
  return first;
}

bool Tracer::GradWasSet(const Tensor& leaf) const {
  const ObserverSlot& slot = leaf.impl()->observer;
  return slot.grad_epoch == epoch_ && (slot.grad_flags & kGradSet) != 0;
}

void Tracer::OnGradRead(const Tensor& leaf, const Tensor& grad) {
  if (routine_depth_ > 0 && routine_has_result_) routine_valid_ = false;
  if (!MarkGrad(leaf, 0)) return;
  touched_.push_back({leaf, grad.impl_ptr(), /*read_first=*/true});
}

void Tracer::OnGradSet(const Tensor& leaf, const Tensor& grad) {
  const bool first = MarkGrad(leaf, kGradSet);
  if (routine_depth_ > 0 && routine_has_result_) routine_valid_ = false;
  if (routine_depth_ > 0 && routine_valid_) {
    // A routine may bind the .grad of a leaf among its tensors to one of its
    // results (a backward's accumulation); anything else is not recorded.
    int index = -1;
    for (size_t i = 0; i < routine_tensors_.size(); ++i) {
      if (routine_tensors_[i].impl() == leaf.impl())
        index = static_cast<int>(i);
    }
    const int v = grad.defined() ? Lookup(grad) : kNone;
    if (index < 0 || v == kNone || v < static_cast<int>(routine_.begin)) {
      routine_valid_ = false;
    } else {
      routine_.grads_set.push_back({index, v});
      routine_grads_.insert(grad.impl());
    }
  }
  // Set before any read: the binding before the step does not matter to the
  // graph (only to a re-trace that must put it back).
  if (!first) return;
  // Read without leaf.grad(), which would report a read to this tracer.
  const AutogradMeta* meta = leaf.impl()->autograd.get();
  touched_.push_back({leaf,
                      remember_grads_ && meta != nullptr ? meta->grad : nullptr,
                      /*read_first=*/false});
}

void Tracer::BindGrad(const std::shared_ptr<TensorImpl>& leaf, Tensor grad) {
  // (OnGradSet outside a routine, without a Tensor for the leaf unless it
  // is the first time: a recording call binds every parameter's .grad.)
  std::unique_ptr<AutogradMeta>& meta = leaf->autograd;
  if (MarkGrad(*leaf, kGradSet)) {
    touched_.push_back(
        {Tensor(leaf),
         remember_grads_ && meta != nullptr ? meta->grad : nullptr,
         /*read_first=*/false});
  }
  if (meta == nullptr) meta = std::make_unique<AutogradMeta>();
  meta->grad = std::move(grad).release_impl();
}

void Tracer::OnFlagRead(const std::shared_ptr<const bool>& flag, const char* what) {
  if (routine_depth_ > 0) {
    bool known = false;
    for (const TraceRecord::Routine::Flag& f : routine_.flags)
      known |= f.flag == flag;
    if (!known) routine_.flags.push_back({flag, *flag, what});
  }
  for (const FlagGuard& g : flag_guards_) {
    if (g.flag == flag) return;
  }
  flag_guards_.push_back({flag, *flag, what});
}

bool Tracer::MayStandIn(const TraceRecord::Routine& was, bool has_result,
                        absl::Span<const uint64_t> key) const {
  if ((was.result >= 0) != has_result || absl::MakeConstSpan(was.key) != key ||
      was.operands != routine_.operands)
    return false;
  for (const TraceRecord::Routine::Flag& f : was.flags) {
    if (*f.flag != f.value) return false;
  }
  // Its draws: the ones it made first are the next of this call's, and the
  // ones it made again (a backward regenerating a forward's mask) exist.
  if (!was.new_draws.empty() &&
      static_cast<size_t>(was.new_draws.front().first) != draw_offsets_.size())
    return false;
  for (size_t n : was.random_nodes) {
    const int d = expected_->nodes[n].random_draw;
    if (d < 0 ||
        static_cast<size_t>(d) >= draw_offsets_.size() + was.new_draws.size())
      return false;
  }
  return true;
}

ir::Attrs Tracer::LiveRandomAttrs(const TraceRecord::Node& node) const {
  ir::Attrs attrs = node.attrs;
  attrs.Set(AttrKey::kSeed, static_cast<int64_t>(default_generator().seed()));
  attrs.Set(AttrKey::kOffset, draw_offsets_.at(node.random_draw));
  return attrs;
}

bool Tracer::BeginRoutine(absl::Span<const uint64_t> key,
                          const runtime::RoutineTensors& tensors,
                          runtime::RoutineResult* result) {
  if (result != nullptr) result->place = next_node_;
  if (routine_depth_++ > 0 || !break_reason_.empty()) return false;
  confirmed_ = {};
  routine_.begin = next_node_;
  routine_.operands.clear();  // keeps its buffer from call to call
  for (size_t i = 0; i < tensors.size(); ++i)
    routine_.operands.push_back(ValueOf(tensors.ptr(i)));
  const TraceRecord::Routine* was =
      matching_ ? expected_->RoutineAt(next_node_) : nullptr;
  if (was != nullptr && break_reason_.empty() &&
      MayStandIn(*was, result != nullptr, key)) {
    // The same routine on the same operands: its nodes, as recorded. The
    // tensors it writes now hold their results (an in-place write, as the
    // routine's own ops would have made).
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (was->after[i] == was->operands[i]) continue;
      TensorImpl& t = *tensors.impl(i);
      ObserverSlot& storage = t.storage->observer;
      if (storage.epoch != epoch_) storage = {epoch_, 0, 0};
      ++storage.writes;
      Bind(t, was->after[i]);
    }
    for (size_t n : was->lifted)
      live_.push_back({n, expected_->nodes[n].attrs});
    // Its draws, from where the generator is now, as its ops would have
    // made them.
    if (!was->random_nodes.empty()) {
      Generator& g = default_generator();
      const uint64_t base = g.offset();
      for (const auto& [draw, rel] : was->new_draws) {
        const int64_t offset = static_cast<int64_t>(base) + rel;
        draw_of_offset_.try_emplace(offset, draw);
        draw_offsets_.push_back(offset);
      }
      g.set_offset(base + was->generator_advance);
      for (size_t n : was->random_nodes)
        live_.push_back({n, LiveRandomAttrs(expected_->nodes[n])});
    }
    num_ops_ += static_cast<int>(was->end - was->begin);
    if (was->end > was->begin) last_op_ = expected_->nodes[was->end - 1].op;
    next_node_ = was->end;
    // (Not stored: a matching call's routines are the expected record's,
    // which FillRecord puts in.)
    routine_depth_ = 0;
    // The flags its ops read guard this call as if read.
    for (const TraceRecord::Routine::Flag& f : was->flags)
      OnFlagRead(f.flag, f.what);
    // The .grads it bound: shape-only tensors holding the recorded results
    // (set_grad reports each to OnGradSet, as the routine's own would).
    for (const auto& [i, v] : was->grads_set) {
      Tensor g = runtime::MakeMetaTensor(expected_->nodes[v].type,
                                         tensors.impl(i)->storage->device());
      Bind(g, v);
      made_.push_back(g.impl_ptr());
      BindGrad(tensors.ptr(i), std::move(g));
    }
    if (result != nullptr) {
      Tensor r = runtime::MakeMetaTensor(expected_->nodes[was->result].type,
                                         was->result_device);
      Bind(r, was->result);
      made_.push_back(r.impl_ptr());
      result->tensor = std::move(r);
      result->requires_grad = was->result_requires_grad;
    }
    routine_ops_ += static_cast<int>(was->end - was->begin);
    return true;
  }
  routine_.key.assign(key.begin(), key.end());
  routine_.after.clear();
  routine_.grads_set.clear();
  routine_.flags.clear();
  routine_.result = -1;
  routine_tensors_ = tensors.Tensors();
  routine_made_.clear();
  routine_grads_.clear();
  routine_valid_ = true;
  routine_has_result_ = result != nullptr;
  routine_generator_begin_ = default_generator().offset();
  routine_draws_begin_ = draw_offsets_.size();
  routine_.random_nodes.clear();
  routine_.new_draws.clear();
  routine_.generator_advance = 0;
  return false;
}

bool Tracer::RoutineRecordable(const std::vector<TraceRecord::Node>& nodes,
                               const std::vector<Tensor>& tensors,
                               const Tensor* result) {
  TraceRecord::Routine& r = routine_;
  r.end = next_node_;
  // Only a routine whose nodes read nothing but its tensors and its own
  // results, draw no random numbers, and leave no tensor behind but its
  // tensors, the .grads it binds and its result can be stood in for later.
  // A backward may also read the values inside a module's forward recorded
  // as one routine (the tensors its grad rules saved): it describes that
  // forward by its place (autograd::RoutineGroup), and a call that matched
  // the record up to the backward holds the same values there.
  if (r.end > nodes.size()) return false;
  const std::vector<TraceRecord::Routine>& recorded =
      matching_ ? expected_->routines : record_.routines;
  auto in_forward = [&](int v) {
    for (const TraceRecord::Routine& f : recorded) {
      if (f.result >= 0 && static_cast<size_t>(v) >= f.begin &&
          static_cast<size_t>(v) < f.end)
        return true;
    }
    return false;
  };
  absl::flat_hash_set<int> from_before(r.operands.begin(), r.operands.end());
  // Its random nodes, and the draws it made first: offsets from where the
  // generator was when it began (draws are numbered in call order).
  r.random_nodes.clear();
  r.new_draws.clear();
  for (size_t n = r.begin; n < r.end; ++n) {
    if (nodes[n].kind != ir::NodeKind::kOp) return false;
    if (const int d = nodes[n].random_draw; d >= 0) {
      const int next =
          static_cast<int>(routine_draws_begin_ + r.new_draws.size());
      if (d > next || static_cast<size_t>(d) >= draw_offsets_.size())
        return false;
      if (d == next)
        r.new_draws.push_back(
            {d, draw_offsets_[d] -
                    static_cast<int64_t>(routine_generator_begin_)});
      r.random_nodes.push_back(n);
    }
    for (int in : nodes[n].inputs) {
      if ((in < 0 || static_cast<size_t>(in) < r.begin) &&
          !from_before.contains(in) && (in < 0 || !in_forward(in)))
        return false;
    }
  }
  r.generator_advance = default_generator().offset() - routine_generator_begin_;
  absl::flat_hash_set<const TensorImpl*> own;
  for (const Tensor& t : tensors) own.insert(t.impl());
  if (result != nullptr) own.insert(result->impl());
  for (const std::weak_ptr<TensorImpl>& weak : routine_made_) {
    std::shared_ptr<TensorImpl> alive = weak.lock();
    if (alive != nullptr && !own.contains(alive.get()) &&
        !routine_grads_.contains(alive.get()))
      return false;
  }
  routine_made_.clear();
  r.after.clear();
  for (const Tensor& t : tensors) {
    const int v = Lookup(t);
    if (v == kNone) return false;
    r.after.push_back(v);
  }
  if (result == nullptr) return true;
  // A result: one of its own nodes, in storage none of its tensors share,
  // and nothing else written or bound.
  const int v = Lookup(*result);
  if (v == kNone || v < static_cast<int>(r.begin) ||
      v >= static_cast<int>(r.end) || r.after != r.operands ||
      !r.grads_set.empty())
    return false;
  for (const Tensor& t : tensors) {
    if (t.storage() == result->storage()) return false;
  }
  r.result = v;
  r.result_requires_grad = result->requires_grad();
  r.result_device = result->device();
  return true;
}

bool Tracer::EndRoutine(const Tensor* result) {
  if (routine_depth_ == 0 || --routine_depth_ > 0) return false;
  const std::vector<Tensor> tensors = std::move(routine_tensors_);
  routine_tensors_.clear();
  // (A routine with a result that ends without one threw.)
  if (!break_reason_.empty() || !routine_valid_ ||
      routine_has_result_ != (result != nullptr))
    return false;
  // A call still matching its expected record takes its routines from
  // there (FillRecord); it only checks what the routine did.
  if (!RoutineRecordable(matching_ ? expected_->nodes : record_.nodes, tensors,
                         result))
    return false;
  if (!matching_) record_.routines.push_back(routine_);
  return true;
}

Tensor Tracer::RedoRoutine(uint64_t place, absl::Span<const Tensor> tensors) {
  if (!break_reason_.empty() || redo_node_ >= 0) return Tensor();
  // The record holding the routine: the expected one while this call still
  // matches it; else this call's own (which, having diverged, holds the
  // matched prefix and its routines).
  const TraceRecord& record = matching_ ? *expected_ : record_;
  const TraceRecord::Routine* r = record.RoutineAt(place);
  if (r == nullptr || r->result < 0 || r->end > record.nodes.size() ||
      r->operands.size() != tensors.size())
    return Tensor();
  std::vector<Tensor> made(r->end - r->begin);
  absl::InlinedVector<Tensor, 4> in;
  for (size_t n = r->begin; n < r->end; ++n) {
    const TraceRecord::Node& node = record.nodes[n];
    in.clear();
    for (int v : node.inputs) {
      if (v >= static_cast<int>(r->begin)) {
        in.push_back(made[v - r->begin]);
        continue;
      }
      const auto at = std::find(r->operands.begin(), r->operands.end(), v);
      if (at == r->operands.end()) return Tensor();
      in.push_back(tensors[at - r->operands.begin()]);
    }
    redo_node_ = static_cast<int>(n);
    try {
      // (A random op draws what this call drew for it.)
      made[n - r->begin] = runtime::Dispatch(
          node.op, in,
          node.random_draw >= 0 ? LiveRandomAttrs(node) : node.attrs);
    } catch (...) {
      redo_node_ = -1;
      throw;
    }
    redo_node_ = -1;
  }
  return made[r->result - r->begin];
}

Trace Tracer::End(absl::Span<const Tensor> outputs) {
  runtime::SetDispatchObserver(previous_);
  active_ = false;
  Trace trace;
  const uint64_t generator_end = default_generator().offset();
  if (generator_end > generator_offset_) {
    trace.random = {static_cast<int64_t>(generator_offset_),
                    static_cast<int64_t>(generator_end - generator_offset_)};
  }
  trace.num_ops = num_ops_;
  trace.routine_ops = routine_ops_;
  trace.break_reason = break_reason_;
  // (End is the tracer's last use but for KeptMetaTensors: what the trace
  // takes is moved.)
  trace.flag_guards = std::move(flag_guards_);
  if (break_reason_.empty()) {
    for (const Tensor& t : outputs) record_.returns.push_back(ValueOf(t));
    record_.num_outputs = static_cast<int>(record_.returns.size());
    // Final .grad bindings (read them before emitting assigns: a binding to
    // a tensor never seen by an op makes it state).
    for (const GradTouch& touch : touched_) {
      // A .grad that was only read (and maybe updated in place) keeps its
      // tensor; its contents come back through the state write-back.
      const Tensor& leaf = touch.leaf;
      if (!GradWasSet(leaf)) continue;
      const AutogradMeta* meta = leaf.impl()->autograd.get();
      const std::shared_ptr<TensorImpl>* grad =
          meta != nullptr && meta->grad ? &meta->grad : nullptr;
      int index = -1;
      if (grad != nullptr) {
        index = static_cast<int>(record_.returns.size());
        const int v = Lookup(**grad);
        record_.returns.push_back(v != kNone ? v : ValueOf(Tensor(*grad)));
      }
      record_.grad_bindings.push_back({leaf.impl(), index});
    }
    // Write-back: state whose tensor now holds a newer value.
    static const ir::Attrs kNoAttrs;
    static const ir::TensorType kNoType;
    for (size_t i = 0; i < state_params_.size(); ++i) {
      const int latest = Lookup(StateAt(i));
      if (latest == state_params_[i]) continue;
      const int in[] = {state_params_[i], latest};
      if (matching_ && next_node_ < expected_->nodes.size()) {
        // The expected assign (the common case): only compared.
        const TraceRecord::Node& e = expected_->nodes[next_node_];
        if (e.kind == ir::NodeKind::kAssign &&
            absl::MakeConstSpan(e.inputs) == absl::MakeConstSpan(in)) {
          ++next_node_;
          continue;
        }
      }
      AddNode(ir::NodeKind::kAssign, ir::OpId{}, in, kNoAttrs, kNoType);
    }
    if (matching_ && (next_node_ != expected_->nodes.size() ||
                      num_params_ != expected_->params.size() ||
                      record_.returns != expected_->returns ||
                      record_.num_outputs != expected_->num_outputs ||
                      record_.grad_bindings != expected_->grad_bindings))
      Diverge();
    // The leaves to rebind after a replay of what this call recorded (a
    // matching call replays its specialization, which has them).
    if (!matching_) {
      trace.grad_bindings.reserve(record_.grad_bindings.size());
      size_t b = 0;
      for (const GradTouch& touch : touched_) {
        if (b < record_.grad_bindings.size() &&
            record_.grad_bindings[b].first == touch.leaf.impl())
          trace.grad_bindings.push_back(
              {touch.leaf, record_.grad_bindings[b++].second});
      }
    }
  }
  trace.grad_touched = std::move(touched_);
  trace.matched = matching_ && break_reason_.empty();
  trace.unfilled = matching_ ? next_node_ : 0;
  trace.unfilled_params = matching_ ? num_params_ : 0;
  trace.unfilled_live = std::move(live_);
  trace.num_outputs = record_.num_outputs;
  trace.record = std::move(record_);
  trace.state = std::move(state_);
  trace.borrowed_state = borrowed_state_;
  trace.borrowed_from = expected_state_;
  if (expected_ == nullptr && break_reason_.empty())
    trace.graph = BuildGraph(trace.record, name_);
  return trace;
}

std::vector<Tracer::Kept> Tracer::KeptMetaTensors() const {
  std::vector<Kept> kept;
  absl::flat_hash_set<const TensorImpl*> seen;
  for (const std::weak_ptr<TensorImpl>& weak : made_) {
    std::shared_ptr<TensorImpl> alive = weak.lock();
    if (alive == nullptr || !alive->storage->is_meta() ||
        !seen.insert(alive.get()).second)
      continue;
    const ObserverSlot& slot = alive->observer;
    const ObserverSlot& storage = alive->storage->observer;
    const bool known = slot.epoch == epoch_ && !(storage.epoch == epoch_ &&
                                                 storage.writes != slot.writes);
    kept.push_back({Tensor(std::move(alive)), known ? slot.value : kUnknown});
  }
  return kept;
}

}  // namespace stepjit::frontend
