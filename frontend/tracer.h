// The tracer: observes runtime dispatch during one eager step and records it as IR.
#ifndef STEPJIT_FRONTEND_TRACER_H_
#define STEPJIT_FRONTEND_TRACER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "ir/graph.h"
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

// The .grad binding a leaf had when the traced step first read it; a replay
// is only valid while it is the same tensor (or still none).
struct GradGuard {
  Tensor leaf;
  std::shared_ptr<TensorImpl> grad;
};

// A host flag (a module's training flag) the traced step read, and the
// value it had: a replay is only valid while the flag keeps it.
struct FlagGuard {
  std::shared_ptr<const bool> flag;
  bool value = false;
  const char* what = "";
};

// A leaf's .grad binding before the step first touched it (a shape-only
// re-trace puts these back: it must leave no trace of itself).
struct GradBefore {
  Tensor leaf;
  Tensor grad;  // undefined: it had none
};

struct Trace {
  std::unique_ptr<ir::Graph> graph;
  std::vector<Tensor> state;  // bound to the graph's state params, in order
  int num_outputs = 0;        // the step's own results: the first returns
  std::vector<GradBinding> grad_bindings;
  std::vector<GradGuard> grad_guards;
  std::vector<FlagGuard> flag_guards;
  std::vector<GradBefore> grad_before;
  // Non-empty when the step cannot be replayed (a graph break): the reason.
  std::string break_reason;
  int num_ops = 0;
};

class Tracer : public runtime::DispatchObserver {
 public:
  // `remember_grads`: fill Trace::grad_before (a shape-only re-trace needs
  // it; a real trace does not, and holding old .grads would keep them alive).
  explicit Tracer(std::string graph_name, bool remember_grads = false);
  ~Tracer() override;

  // Starts recording on this thread; the step's tensor arguments become inputs.
  void Begin(absl::Span<const Tensor> inputs);
  // Stops recording; `outputs` become the graph's returns.
  Trace End(absl::Span<const Tensor> outputs);

  void OnOp(ir::OpId op, absl::Span<const Tensor> inputs, const ir::Attrs& attrs,
            const Tensor& output) override;
  void OnHostRead(const Tensor& tensor, const char* what) override;
  void OnGradRead(const Tensor& leaf, const Tensor& grad) override;
  void OnGradSet(const Tensor& leaf, const Tensor& grad) override;
  void OnAlias(const Tensor& source, const Tensor& alias) override;
  void OnFlagRead(const std::shared_ptr<const bool>& flag, const char* what) override;

  // After End: the shape-only (meta) tensors the step recorded that are
  // still alive (the step kept them: a module's cache, lazily created
  // optimizer state), each with the value of `graph` it holds, or nullptr
  // when an in-place write through another view made that value unknown.
  struct Kept {
    Tensor tensor;
    const ir::Value* value;
  };
  std::vector<Kept> KeptMetaTensors() const;
  // After End on a step whose graph broke: the ops recorded before the break
  // and the state tensors they read (End returns neither then).
  std::pair<std::unique_ptr<ir::Graph>, std::vector<Tensor>> TakePartial();

 private:
  // The SSA value currently held by `t`; tensors first seen here were
  // created outside the step and become state params.
  ir::Value* ValueOf(const Tensor& t);
  void Break(std::string reason);

  std::string name_;
  bool remember_grads_;
  std::unique_ptr<ir::Graph> graph_;
  runtime::DispatchObserver* previous_ = nullptr;
  bool active_ = false;
  // Keyed by impl address. Entries hold a weak reference instead of pinning
  // the tensor (pinning would change what the step does: autograd steals
  // gradient buffers only when nothing else holds them); an expired entry
  // means the address now belongs to a different tensor.
  struct Entry {
    std::weak_ptr<TensorImpl> impl;
    ir::Value* value;
    // Set when an in-place op wrote this tensor's storage through another
    // tensor (a view or alias): reading it afterwards has no SSA meaning.
    bool stale = false;
  };
  ir::Value* Lookup(const Tensor& t);
  void Bind(const Tensor& t, ir::Value* value);
  absl::flat_hash_map<const TensorImpl*, Entry> values_;
  absl::flat_hash_map<const Storage*, std::vector<const TensorImpl*>> by_storage_;
  std::vector<Tensor> state_;
  absl::flat_hash_map<const TensorImpl*, ir::Value*> state_params_;
  std::vector<Tensor> grad_touched_;  // leaves whose .grad was read or set
  absl::flat_hash_set<const TensorImpl*> grad_seen_;
  absl::flat_hash_set<const TensorImpl*> grad_set_;  // rebound during the step
  std::vector<GradGuard> grad_guards_;
  std::vector<FlagGuard> flag_guards_;
  std::vector<GradBefore> grad_before_;
  std::string break_reason_;
  std::string last_op_;
  int num_ops_ = 0;
};

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_TRACER_H_
