// The autograd engine: op nodes with saved tensors, leaf accumulation, backward.
#include "runtime/autograd/engine.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/amp/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/grad_rules.h"
#include "runtime/dispatch.h"
#include "runtime/object_pool.h"
#include "runtime/ops.h"

namespace stepjit::autograd {
namespace {

// Differentiates one recorded op. Inputs and output are saved as detached
// aliases (no autograd meta), so the graph holds no reference cycle.
class OpNode : public Node {
 public:
  OpNode(ir::OpId op, const ir::Attrs& attrs, absl::Span<const Tensor> inputs,
         const Tensor& output)
      : op_(op), attrs_(attrs), output_(output.detach()) {
    for (const Tensor& t : inputs) {
      inputs_.push_back(t.detach());
      versions_.push_back(t.version());
      needs_.push_back(t.requires_grad());
      next_.push_back(GradientEdge(t));
    }
    output_version_ = output.version();
  }

  std::vector<Tensor> Apply(Tensor grad) override {
    for (size_t i = 0; i < inputs_.size(); ++i) CheckVersion(inputs_[i], versions_[i], i);
    CheckVersion(output_, output_version_, -1);
    std::vector<Tensor> grads =
        ComputeGrads(GradContext{op_, attrs_, inputs_, output_, needs_}, grad);
    grads.resize(inputs_.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!needs_[i] || !grads[i].defined()) {
        grads[i] = Tensor();
        continue;
      }
      if (grads[i].shape() != inputs_[i].shape()) {
        grads[i] = sum_to_size(grads[i], inputs_[i].shape());
      }
      if (grads[i].dtype() != inputs_[i].dtype()) grads[i] = grads[i].to(inputs_[i].dtype());
    }
    return grads;
  }

  std::string name() const override { return absl::StrCat(ir::OpName(op_), "_backward"); }
  void set_group(std::shared_ptr<RoutineGroup> group) {
    group_ = std::move(group);
  }

  // What decides the ops Apply dispatches besides its saved tensors (which
  // identify the recorded op, its attributes and operands): the op, which
  // inputs need a grad, and whether every saved tensor is still at its
  // saved version (else Apply throws).
  bool Describe(std::vector<uint64_t>& key,
                runtime::RoutineTensors& tensors) const override {
    bool versions = output_.version() == output_version_;
    uint64_t needs = 0;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      versions &= inputs_[i].version() == versions_[i];
      needs |= uint64_t{needs_[i]} << i;
    }
    key.insert(key.end(), {1, static_cast<uint64_t>(op_), needs,
                           uint64_t{versions}, inputs_.size()});
    tensors.Add(output_);
    for (const Tensor& t : inputs_) tensors.Add(t);
    return true;
  }

 private:
  void CheckVersion(const Tensor& t, uint64_t expected, int64_t index) const {
    SJ_REQUIRE(t.version() == expected,
               "one of the tensors needed for the gradient of ", ir::OpName(op_), " (",
               index < 0 ? std::string("its output") : absl::StrCat("input ", index),
               ", shape ", ir::ShapeToString(t.shape()),
               ") was modified by an in-place operation: version ", t.version(),
               ", expected ", expected);
  }

  ir::OpId op_;
  ir::Attrs attrs_;
  absl::InlinedVector<Tensor, 3> inputs_;
  Tensor output_;
  absl::InlinedVector<uint64_t, 3> versions_;
  uint64_t output_version_ = 0;
  absl::InlinedVector<bool, 3> needs_;
};

// Runs the leaf's post-accumulate hooks on a copy of the list, so that a hook
// may add or remove hooks (its own included) while they run.
void RunPostAccumulateHooks(const Tensor& leaf) {
  AutogradMeta* meta = leaf.impl()->autograd.get();
  if (meta == nullptr || meta->post_accumulate_hooks.empty()) return;
  const auto hooks = meta->post_accumulate_hooks;
  for (const auto& [handle, hook] : hooks) hook(leaf);
}

// Adds incoming gradients into a leaf's .grad.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {}

  std::vector<Tensor> Apply(Tensor grad) override {
    std::shared_ptr<TensorImpl> impl = leaf_.lock();
    if (!impl) return {};
    Tensor leaf(impl);
    Tensor current = leaf.grad();
    if (!current.defined()) {
      // Steal the buffer when nothing else can see it; otherwise copy, so
      // that in-place updates of one .grad never alias another tensor.
      const bool exclusive = grad.impl_ptr().use_count() == 1 &&
                             grad.storage().use_count() == 1 && grad.is_contiguous();
      leaf.set_grad(exclusive ? grad : grad.clone());
    } else {
      current.add_(grad);
    }
    RunPostAccumulateHooks(leaf);
    return {};
  }
  std::string name() const override { return "accumulate_grad"; }

  // The leaf (dead or alive), whether it has a .grad (set or added to);
  // false for a leaf with post-accumulate hooks, whose code no key covers.
  bool Describe(std::vector<uint64_t>& key,
                runtime::RoutineTensors& tensors) const override {
    std::shared_ptr<TensorImpl> impl = leaf_.lock();
    if (!impl) {
      key.push_back(2);
      return true;
    }
    if (impl->autograd && !impl->autograd->post_accumulate_hooks.empty())
      return false;
    Tensor leaf(std::move(impl));
    Tensor current = leaf.grad();
    key.insert(key.end(), {3, uint64_t{current.defined()}});
    // (Held by the list: the weak reference is all this node has.)
    tensors.Add(std::move(leaf));
    if (current.defined()) tensors.Add(std::move(current));
    return true;
  }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// Stands for the nodes of a routine a recording call did not run
// (SetRoutineResult): described as its group. A backward that runs op by op
// replaces it first (RedoRoutines); one that reaches it anyway (no
// observer could dispatch its ops again) throws.
class RoutineNode : public Node {
 public:
  RoutineNode(std::shared_ptr<RoutineGroup> group) {
    next_.assign(group->edges.begin(), group->edges.end());
    group_ = std::move(group);
  }
  std::vector<Tensor> Apply(Tensor grad) override;
  std::string name() const override { return "recorded_routine"; }
};

thread_local RoutineGroup* t_group = nullptr;
thread_local std::shared_ptr<RoutineGroup>* t_group_owner = nullptr;

// The running backward of this thread: its id and queued callbacks. Nested
// backwards (one started by a hook or callback) stack through BackwardScope.
struct BackwardContext {
  uint64_t id = 0;
  std::vector<std::function<void()>> callbacks;
};
thread_local BackwardContext* t_backward = nullptr;
std::atomic<uint64_t> g_next_backward_id{1};
std::atomic<int> g_next_hook_handle{1};

class BackwardScope {
 public:
  BackwardScope() : outer_(t_backward) {
    context_.id = g_next_backward_id.fetch_add(1);
    t_backward = &context_;
  }
  ~BackwardScope() { t_backward = outer_; }
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;

  // By index: a callback may queue more, which grows the vector.
  void RunCallbacks() {
    for (size_t i = 0; i < context_.callbacks.size(); ++i) {
      std::function<void()> callback = std::move(context_.callbacks[i]);
      callback();
    }
    context_.callbacks.clear();
  }

 private:
  BackwardContext context_;
  BackwardContext* outer_;
};

// Runs the graph from `start` with `seed` as its gradient, each node once all
// the edges into it have delivered.
void RunGraph(const std::shared_ptr<Node>& start, const Tensor& seed) {
  // Count, for every node, how many edges lead into it.
  absl::flat_hash_map<Node*, int> deps;
  std::vector<Node*> stack = {start.get()};
  absl::flat_hash_map<Node*, bool> seen = {{start.get(), true}};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& next : n->next()) {
      if (!next) continue;
      ++deps[next.get()];
      if (!seen[next.get()]) {
        seen[next.get()] = true;
        stack.push_back(next.get());
      }
    }
  }
  absl::flat_hash_map<Node*, Tensor> buffers;
  buffers[start.get()] = seed.detach();
  std::deque<Node*> ready = {start.get()};
  while (!ready.empty()) {
    Node* n = ready.front();
    ready.pop_front();
    Tensor g = std::move(buffers[n]);
    buffers.erase(n);
    // A node reached only by undefined gradients contributes nothing, but
    // still releases its children so that their other inputs are counted.
    std::vector<Tensor> grads;
    if (g.defined()) grads = n->Apply(std::move(g));
    for (size_t i = 0; i < n->next().size(); ++i) {
      Node* next = n->next()[i].get();
      if (next == nullptr) continue;
      if (i < grads.size() && grads[i].defined()) {
        Tensor& buf = buffers[next];
        buf = buf.defined() ? add(buf, grads[i]) : std::move(grads[i]);
      }
      if (--deps[next] == 0) ready.push_back(next);
    }
  }
}

}  // namespace

std::vector<Tensor> RoutineNode::Apply(Tensor grad) {
  throw Error(
      "backward reached a library routine that the recording check stood in "
      "for without running its ops, and its ops cannot be run again here; "
      "the recording is inconclusive and the call runs as written");
}

namespace {

// The node that recording `routine`'s ops again (RedoRoutine) gives its
// result, or null when the observer cannot.
std::shared_ptr<Node> Redo(runtime::DispatchObserver& observer,
                           const RoutineNode& routine) {
  // Grad mode on while alive (the routine's ops record their nodes).
  struct GradOn {
    const bool was = GradMode::is_enabled();
    GradOn() { GradMode::set_enabled(true); }
    ~GradOn() { GradMode::set_enabled(was); }
  } grad_on;
  // The record holds autocast's casts as ops of their own.
  amp::Autocast no_autocast(ir::DType::kBF16, /*enabled=*/false);
  const Tensor result =
      observer.RedoRoutine(routine.group()->place, routine.group()->tensors);
  return result.defined() ? result.grad_fn() : nullptr;
}

// Before a backward that runs the graph from `start` op by op: each node
// standing for a routine a recording call did not run is replaced, in
// every edge that leads to it, by the nodes its ops record when the
// observer dispatches them again, so that the backward runs exactly the
// nodes (in the same order) the routine's own ops would have given it.
void RedoRoutines(std::shared_ptr<Node>& start) {
  runtime::DispatchObserver* observer = runtime::GetDispatchObserver();
  if (observer == nullptr) return;
  absl::flat_hash_map<const Node*, std::shared_ptr<Node>> redone;
  auto resolve = [&](std::shared_ptr<Node>& edge) {
    const auto* routine = dynamic_cast<const RoutineNode*>(edge.get());
    if (routine == nullptr) return;
    auto it = redone.find(routine);
    if (it == redone.end())
      it = redone.emplace(routine, Redo(*observer, *routine)).first;
    if (it->second != nullptr) edge = it->second;
  };
  resolve(start);
  std::vector<Node*> stack = {start.get()};
  absl::flat_hash_set<const Node*> seen = {start.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (size_t i = 0; i < n->next().size(); ++i) {
      std::shared_ptr<Node>& edge = n->mutable_edge(i);
      if (!edge) continue;
      resolve(edge);
      if (seen.insert(edge.get()).second) stack.push_back(edge.get());
    }
  }
}

}  // namespace

std::shared_ptr<Node> GradientEdge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  AutogradMeta* meta = t.impl()->autograd.get();
  if (meta->grad_fn) return meta->grad_fn;
  if (!meta->grad_accumulator) {
    meta->grad_accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
  }
  return meta->grad_accumulator;
}

namespace {

// A group for the routine at `place` on `tensors`: their gradient edges now.
std::shared_ptr<RoutineGroup> MakeGroup(uint64_t place,
                                        std::vector<Tensor> tensors) {
  auto group = std::make_shared<RoutineGroup>();
  group->place = place;
  for (const Tensor& t : tensors) group->edges.push_back(GradientEdge(t));
  group->tensors = std::move(tensors);
  return group;
}

}  // namespace

RoutineScope::RoutineScope(uint64_t place, std::vector<Tensor> tensors) {
  if (t_group != nullptr) return;
  group_ = MakeGroup(place, std::move(tensors));
  t_group = group_.get();
  t_group_owner = &group_;
}

RoutineScope::~RoutineScope() {
  if (group_ == nullptr) return;
  t_group = nullptr;
  t_group_owner = nullptr;
}

bool RoutineScope::InScope() { return t_group != nullptr; }

void RoutineScope::Close() {
  if (group_ == nullptr) return;
  RoutineGroup& g = *group_;
  for (const std::weak_ptr<Node>& weak : g.members) {
    const std::shared_ptr<Node> member = weak.lock();
    if (member == nullptr) continue;
    for (const std::shared_ptr<Node>& next : member->next()) {
      if (next == nullptr || next->group() == &g) continue;
      if (std::find(g.edges.begin(), g.edges.end(), next) == g.edges.end())
        return;
    }
  }
  g.members.clear();
  g.closed = true;
}

void SetRoutineResult(const Tensor& result, uint64_t place,
                      std::vector<Tensor> tensors) {
  std::shared_ptr<RoutineGroup> group = MakeGroup(place, std::move(tensors));
  group->closed = true;
  TensorImpl* impl = result.impl();
  if (!impl->autograd) impl->autograd = std::make_unique<AutogradMeta>();
  impl->autograd->requires_grad = true;
  impl->autograd->grad_fn = std::make_shared<RoutineNode>(std::move(group));
}

void RecordOp(ir::OpId op, absl::Span<const Tensor> inputs,
              const ir::Attrs& attrs, const Tensor& output) {
  auto node = std::allocate_shared<OpNode>(runtime::PoolAllocator<OpNode>{}, op,
                                           attrs, inputs, output);
  if (t_group != nullptr) {
    node->set_group(*t_group_owner);
    t_group->members.push_back(node);
  }
  TensorImpl* impl = output.impl();
  if (!impl->autograd) impl->autograd = std::make_unique<AutogradMeta>();
  impl->autograd->requires_grad = true;
  impl->autograd->grad_fn = std::move(node);
}

// For a recording tracer (runtime::RecordedRoutine): what decides the ops a
// backward from `start` dispatches. Nodes in the order RunGraph counts
// them, each with its kind, what Describe gives and where its edges lead;
// the root's explicit gradient. The nodes of a closed routine group count
// as one, described by its place and its edges (its ops are decided by the
// routine, which the recording matched). False when some node runs code no
// key covers (a hook, a node of another kind).
bool DescribeBackward(const std::shared_ptr<Node>& start, const Tensor& grad,
                      std::vector<uint64_t>& key,
                      runtime::RoutineTensors& tensors) {
  // Kept per thread, so that a recording call's backward allocates nothing
  // here after the first.
  thread_local absl::flat_hash_map<const void*, uint64_t> index;
  thread_local std::vector<const Node*> order;
  index.clear();
  order.clear();
  // A node's identity in the walk: its closed group, or itself.
  auto identity = [](const Node* n) -> const void* {
    const RoutineGroup* g = n->group();
    return g != nullptr && g->closed ? static_cast<const void*>(g) : n;
  };
  auto edges = [](const Node* n) -> absl::Span<const std::shared_ptr<Node>> {
    const RoutineGroup* g = n->group();
    if (g != nullptr && g->closed) return g->edges;
    return n->next();
  };
  index.emplace(identity(start.get()), 0);
  order.push_back(start.get());
  for (size_t k = 0; k < order.size(); ++k) {
    for (const auto& next : edges(order[k])) {
      if (next && index.try_emplace(identity(next.get()), order.size()).second)
        order.push_back(next.get());
    }
  }
  key.push_back(grad.defined());
  if (grad.defined()) tensors.Add(grad);
  for (const Node* n : order) {
    if (const RoutineGroup* g = n->group(); g != nullptr && g->closed) {
      key.insert(key.end(), {5, g->place, g->tensors.size()});
      for (const Tensor& t : g->tensors) tensors.Add(t);
    } else if (!n->Describe(key, tensors)) {
      return false;
    }
    const auto out = edges(n);
    key.push_back(out.size());
    for (const auto& next : out)
      key.push_back(next ? index.at(identity(next.get())) : ~uint64_t{0});
  }
  return true;
}

void Backward(const Tensor& root, const Tensor& grad) {
  SJ_REQUIRE(root.defined(), "backward() called on an undefined tensor");
  // Grad rules run in the dtypes the forward chose; autocast does not
  // re-cast them (as in PyTorch, backward ops are not autocast).
  amp::Autocast no_autocast(ir::DType::kBF16, /*enabled=*/false);
  SJ_REQUIRE(root.requires_grad(),
             "backward(): the tensor does not require grad and has no grad_fn");
  if (!grad.defined()) {
    SJ_REQUIRE(
        root.numel() == 1,
        "backward() without a gradient needs a scalar output, got shape ",
        ir::ShapeToString(root.shape()));
  } else {
    SJ_REQUIRE(grad.shape() == root.shape(), "backward(): gradient shape ",
               ir::ShapeToString(grad.shape()), " does not match output shape ",
               ir::ShapeToString(root.shape()));
  }
  std::shared_ptr<Node> start = root.grad_fn();
  if (!start) start = root.impl()->autograd->grad_accumulator;
  // A recording tracer may take the whole backward from its record.
  std::optional<runtime::RecordedRoutine> routine;
  if (start && runtime::GetDispatchObserver() != nullptr) {
    thread_local std::vector<uint64_t> key;
    thread_local runtime::RoutineTensors tensors;
    key.clear();
    tensors.clear();
    const bool described = DescribeBackward(start, grad, key, tensors);
    if (described) routine.emplace(key, tensors);
    tensors.clear();  // holds no tensor beyond this point
    if (described && routine->skipped()) return;
  }
  Tensor seed = grad;
  if (!seed.defined()) {
    // On the root's device: a CPU seed would reach the first grad rule as a
    // CPU operand (sum's backward expands it to the input's shape).
    runtime::FactoryDeviceGuard on_root(root.device());
    // Marked, so that a traced step's seed can be found by the grad-scaler
    // pass.
    seed = runtime::Dispatch(
        ir::OpId::kFull, {},
        {{ir::AttrKey::kShape,
          std::vector<int64_t>(root.shape().begin(), root.shape().end())},
         {ir::AttrKey::kValue, 1.0},
         {ir::AttrKey::kDTypeAttr, root.dtype()},
         {ir::AttrKey::kRole, std::string("grad_seed")}});
  }
  if (start) RedoRoutines(start);
  NoGradGuard no_grad;
  BackwardScope scope;
  if (start) {
    RunGraph(start, seed);
  } else {
    AccumulateGrad(root.impl_ptr()).Apply(seed.detach());
  }
  scope.RunCallbacks();
}

int AddPostAccumulateGradHook(const Tensor& leaf,
                              std::function<void(const Tensor& leaf)> hook) {
  SJ_REQUIRE(leaf.defined(),
             "AddPostAccumulateGradHook: the tensor is undefined");
  SJ_REQUIRE(leaf.is_leaf() && leaf.requires_grad(),
             "AddPostAccumulateGradHook: expected a leaf tensor that requires "
             "grad, got ",
             leaf.is_leaf() ? "a leaf that does not require grad"
                            : "a non-leaf (it has a grad_fn)");
  SJ_REQUIRE(hook != nullptr, "AddPostAccumulateGradHook: the hook is empty");
  const int handle = g_next_hook_handle.fetch_add(1);
  leaf.impl()->autograd->post_accumulate_hooks.emplace_back(handle,
                                                            std::move(hook));
  return handle;
}

bool RemovePostAccumulateGradHook(const Tensor& leaf, int handle) {
  if (!leaf.defined() || !leaf.impl()->autograd) return false;
  auto& hooks = leaf.impl()->autograd->post_accumulate_hooks;
  for (auto it = hooks.begin(); it != hooks.end(); ++it) {
    if (it->first == handle) {
      hooks.erase(it);
      return true;
    }
  }
  return false;
}

void QueueCallback(std::function<void()> callback) {
  SJ_REQUIRE(t_backward != nullptr,
             "QueueCallback: expected to be called during backward() (from a "
             "hook or a "
             "gradient computation), found no backward running on this thread");
  SJ_REQUIRE(callback != nullptr, "QueueCallback: the callback is empty");
  t_backward->callbacks.push_back(std::move(callback));
}

uint64_t CurrentBackwardId() { return t_backward ? t_backward->id : 0; }

}  // namespace stepjit::autograd
