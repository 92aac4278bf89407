// The tracer: observes runtime dispatch during one eager step and records it as IR.
#ifndef STEPJIT_FRONTEND_TRACER_H_
#define STEPJIT_FRONTEND_TRACER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "frontend/trace_record.h"
#include "ir/graph.h"
#include "program/random_layout.h"
#include "runtime/dispatch.h"
#include "runtime/tensor.h"

namespace stepjit::frontend {

// After a replay, leaf.grad is rebound to the graph's return number
// `return_index` (or reset when it is -1), as the eager step would have
// left it. Bindings are returns so that passes keep them up to date.
struct GradBinding {
  Tensor leaf;
  int return_index = -1;
};

// A leaf whose .grad the step read or set, and the binding it had before
// the step first touched it. A replay is only valid while a .grad the step
// read first (`read_first`) is still that tensor (or still none); a
// shape-only re-trace puts every binding back (it must leave no trace of
// itself). `before` of a leaf set first is kept only when the tracer
// remembers grads: holding an old .grad would keep it alive.
struct GradTouch {
  Tensor leaf;
  std::shared_ptr<TensorImpl> before;
  bool read_first = false;
};

// A host flag (a module's training flag) the traced step read, and the
// value it had: a replay is only valid while the flag keeps it.
struct FlagGuard {
  std::shared_ptr<const bool> flag;
  bool value = false;
  const char* what = "";
};

struct Trace {
  // What the step did, as recorded. With an expected record (a recording
  // call checked against a specialization), the leading `unfilled` nodes
  // matched it and are not copied: FillRecord puts them in.
  TraceRecord record;
  size_t unfilled = 0;
  // Likewise the leading `unfilled_params` params (all of them: a matching
  // call's params are the expected record's).
  size_t unfilled_params = 0;
  // This call's attributes of the random and lifted nodes among the
  // unfilled ones (the rest are the expected record's).
  std::vector<std::pair<size_t, ir::Attrs>> unfilled_live;
  // Built from the record by End, except for a recording call checked
  // against an expected record (BuildGraph makes it when needed), or when
  // the graph broke.
  std::unique_ptr<ir::Graph> graph;
  // Bound to the graph's state params, in order. A recording call that
  // matched its expected record leaves the leading `borrowed_state` of them
  // out: they are `borrowed_from`'s (the expected specialization's), which
  // FillState puts in.
  std::vector<Tensor> state;
  size_t borrowed_state = 0;
  absl::Span<const Tensor> borrowed_from;
  int num_outputs = 0;        // the step's own results: the first returns
  std::vector<GradBinding> grad_bindings;
  // Leaves whose .grad the step touched, in the order it first did.
  std::vector<GradTouch> grad_touched;
  std::vector<FlagGuard> flag_guards;
  // Non-empty when the step cannot be replayed (a graph break): the reason.
  std::string break_reason;
  int num_ops = 0;
  // Of num_ops, those a recording call took from the expected record for a
  // library routine it stood in for (backward, an optimizer's step) instead
  // of dispatching them.
  int routine_ops = 0;
  // With an expected record: whether this call recorded exactly it.
  bool matched = false;
  // The default generator's offsets the step's draws spanned.
  runtime::RandomLayout random;
};

// Puts into `trace.record` the nodes it left out because they matched
// `expected`, with this call's random draws.
void FillRecord(Trace& trace, const TraceRecord& expected);
// Puts into `trace.state` the state tensors it borrowed.
void FillState(Trace& trace);

class Tracer : public runtime::DispatchObserver {
 public:
  // `remember_grads`: keep every GradTouch::before (a shape-only re-trace
  // needs them; a real trace does not, and holding old .grads would keep
  // them alive).
  // `expected`: compare each op with this record as it arrives, storing
  // nothing while it matches (a recording call's check; End then builds no
  // graph). `expected_state`: the state tensors bound to `expected`'s state
  // params, in order (they outlive the trace); while the call binds the
  // same ones, the trace borrows them instead of holding its own.
  explicit Tracer(std::string graph_name, bool remember_grads = false,
                  const TraceRecord* expected = nullptr,
                  absl::Span<const Tensor> expected_state = {});
  ~Tracer() override;

  // Starts recording on this thread; the step's tensor arguments become inputs.
  void Begin(absl::Span<const Tensor> inputs);
  // Stops recording; `outputs` become the graph's returns. After End the
  // tracer only answers KeptMetaTensors (the trace takes its state).
  Trace End(absl::Span<const Tensor> outputs);

  void OnOp(ir::OpId op, absl::Span<const Tensor> inputs, const ir::Attrs& attrs,
            const Tensor& output) override;
  void OnHostRead(const Tensor& tensor, const char* what) override;
  const ir::TensorType* ExpectedType(ir::OpId op,
                                     absl::Span<const Tensor> inputs,
                                     const ir::Attrs& attrs) override;
  void OnGradRead(const Tensor& leaf, const Tensor& grad) override;
  void OnGradSet(const Tensor& leaf, const Tensor& grad) override;
  void OnAlias(const Tensor& source, const Tensor& alias) override;
  void OnFlagRead(const std::shared_ptr<const bool>& flag, const char* what) override;
  bool BeginRoutine(absl::Span<const uint64_t> key,
                    const runtime::RoutineTensors& tensors,
                    runtime::RoutineResult* result) override;
  bool EndRoutine(const Tensor* result) override;
  Tensor RedoRoutine(uint64_t place, absl::Span<const Tensor> tensors) override;

  // After End: the shape-only (meta) tensors the step recorded that are
  // still alive (the step kept them: a module's cache, lazily created
  // optimizer state), each with the record operand it holds, or no operand
  // (-0x7fffffff, kUnknown) when an in-place write through another view
  // made its value unknown.
  static constexpr int kUnknown = -0x7fffffff;
  struct Kept {
    Tensor tensor;
    int value;
  };
  std::vector<Kept> KeptMetaTensors() const;

 private:
  static constexpr int kNone = 0x7fffffff;
  // The operand currently held by `t` (kNone when unseen); tensors first
  // seen here were created outside the step and become state params.
  int ValueOf(const Tensor& t) { return ValueOf(t.impl_ptr()); }
  int ValueOf(const std::shared_ptr<TensorImpl>& t);
  int Lookup(const TensorImpl& t);
  int Lookup(const Tensor& t) { return Lookup(*t.impl()); }
  void Bind(TensorImpl& t, int value);
  void Bind(const Tensor& t, int value) { Bind(*t.impl(), value); }
  int AddParam(ir::ParamKind kind, const TensorImpl& t);
  // Appends a node (or, while matching the expected record, only checks
  // it); returns its index.
  // `attrs_checked`: ExpectedType already found op and attributes equal to
  // the expected node's.
  int AddNode(ir::NodeKind kind, ir::OpId op, absl::Span<const int> inputs,
              const ir::Attrs& attrs, const ir::TensorType& type,
              bool attrs_checked = false);
  // The call stopped matching before node `next_node_`: copy the matched
  // prefix from the expected record.
  void Diverge();
  void Break(std::string reason);

  std::string name_;
  bool remember_grads_;
  const TraceRecord* expected_;
  bool matching_;
  TraceRecord record_;
  size_t next_node_ = 0;
  // Params so far: while matching, a prefix of the expected record's, not
  // copied into record_ (Diverge copies it).
  size_t num_params_ = 0;
  // The dispatch ExpectedType matched with expected node `node` (its op
  // and attributes), so that OnOp for the same dispatch compares them once.
  struct Confirmed {
    size_t node = SIZE_MAX;
    ir::OpId op{};
    const ir::Attrs* attrs = nullptr;
    const Tensor* inputs = nullptr;
    size_t num_inputs = 0;
  };
  Confirmed confirmed_;
  std::vector<std::pair<size_t, ir::Attrs>> live_;  // Trace::unfilled_live
  absl::flat_hash_map<int64_t, int> draw_of_offset_;
  std::vector<int64_t> draw_offsets_;  // by draw: this call's offset
  uint64_t routine_generator_begin_ = 0;
  size_t routine_draws_begin_ = 0;
  // A random node's attributes with this call's seed and offset (its draw's).
  ir::Attrs LiveRandomAttrs(const TraceRecord::Node& node) const;
  runtime::DispatchObserver* previous_ = nullptr;
  bool active_ = false;
  // What the tracer knows of a tensor lives in its ObserverSlot under this
  // recording's epoch (runtime/storage.h). Tensors the step made, weakly
  // held (pinning them would change what the step does: autograd steals
  // gradient buffers only when nothing else holds them), to find the ones
  // it keeps.
  uint64_t epoch_;
  std::vector<std::weak_ptr<TensorImpl>> made_;
  // State seen so far: the leading `borrowed_state_` are
  // expected_state_'s (not held: the expected specialization holds them),
  // then state_.
  absl::Span<const Tensor> expected_state_;
  size_t borrowed_state_ = 0;
  std::vector<Tensor> state_;
  std::vector<int> state_params_;  // the i-th state tensor's param operand
  const Tensor& StateAt(size_t i) const {
    return i < borrowed_state_ ? expected_state_[i]
                               : state_[i - borrowed_state_];
  }
  // Holds the borrowed state from now on (the call stopped matching).
  void StopBorrowing();
  std::vector<GradTouch> touched_;  // Trace::grad_touched
  // Whether a leaf's .grad was read or set (kGradSeen) and set (kGradSet)
  // during the step, kept in its ObserverSlot; MarkGrad returns whether this
  // is the first time it is seen.
  static constexpr uint32_t kGradSeen = 1, kGradSet = 2;
  bool MarkGrad(const Tensor& leaf, uint32_t flags) {
    return MarkGrad(*leaf.impl(), flags);
  }
  bool MarkGrad(TensorImpl& leaf, uint32_t flags);
  // Binds `grad` (of the leaf's type) as `leaf`'s .grad, as set_grad would
  // with this tracer observing it.
  void BindGrad(const std::shared_ptr<TensorImpl>& leaf, Tensor grad);
  bool GradWasSet(const Tensor& leaf) const;
  std::vector<FlagGuard> flag_guards_;
  std::string break_reason_;
  // The routine being recorded (routine_depth_ > 0; nested ones are part of
  // the outermost), its tensors, and the tensors its ops made (a routine
  // whose made tensors outlive it cannot be stood in for).
  int routine_depth_ = 0;
  TraceRecord::Routine routine_;
  std::vector<Tensor> routine_tensors_;
  std::vector<std::weak_ptr<TensorImpl>> routine_made_;
  // The routine bound .grads (allowed: a backward's results outlive it as
  // .grad) and whether it did only what can be recorded.
  absl::flat_hash_set<const TensorImpl*> routine_grads_;
  bool routine_valid_ = true;
  // The routine has a result (a module's forward).
  bool routine_has_result_ = false;
  // RedoRoutine: the recorded node the op being dispatched again stands
  // for (its result is bound to it; nothing is recorded), or -1.
  int redo_node_ = -1;
  // Whether the recorded routine `was` may stand for this call's (its
  // flags still hold their values).
  bool MayStandIn(const TraceRecord::Routine& was, bool has_result,
                  absl::Span<const uint64_t> key) const;
  // Whether the routine that just ended (nodes [routine_.begin, next_node_)
  // of `nodes`) can be stood in for later; fills routine_.after and, for a
  // routine with a result, its result fields.
  bool RoutineRecordable(const std::vector<TraceRecord::Node>& nodes,
                         const std::vector<Tensor>& tensors,
                         const Tensor* result);
  // Ops of routines taken from the expected record instead of dispatched.
  int routine_ops_ = 0;
  uint64_t generator_offset_ = 0;  // at Begin
  ir::OpId last_op_{};
  int num_ops_ = 0;
};

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_TRACER_H_
