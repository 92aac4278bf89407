// The autograd engine: op nodes with saved tensors, leaf accumulation, backward.
#include "runtime/autograd/engine.h"

#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/amp/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/grad_rules.h"
#include "runtime/dispatch.h"
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
      next_.push_back(EdgeFor(t));
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

 private:
  static std::shared_ptr<Node> EdgeFor(const Tensor& t);

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
  std::vector<Tensor> inputs_;
  Tensor output_;
  std::vector<uint64_t> versions_;
  uint64_t output_version_ = 0;
  std::vector<bool> needs_;
};

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
    return {};
  }
  std::string name() const override { return "accumulate_grad"; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

std::shared_ptr<Node> OpNode::EdgeFor(const Tensor& t) {
  if (!t.requires_grad()) return nullptr;
  AutogradMeta* meta = t.impl()->autograd.get();
  if (meta->grad_fn) return meta->grad_fn;
  if (!meta->grad_accumulator) {
    meta->grad_accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
  }
  return meta->grad_accumulator;
}

}  // namespace

void RecordOp(ir::OpId op, absl::Span<const Tensor> inputs, const ir::Attrs& attrs,
              const Tensor& output) {
  auto node = std::make_shared<OpNode>(op, attrs, inputs, output);
  TensorImpl* impl = output.impl();
  if (!impl->autograd) impl->autograd = std::make_unique<AutogradMeta>();
  impl->autograd->requires_grad = true;
  impl->autograd->grad_fn = std::move(node);
}

void Backward(const Tensor& root, const Tensor& grad) {
  SJ_REQUIRE(root.defined(), "backward() called on an undefined tensor");
  // Grad rules run in the dtypes the forward chose; autocast does not
  // re-cast them (as in PyTorch, backward ops are not autocast).
  amp::Autocast no_autocast(ir::DType::kBF16, /*enabled=*/false);
  SJ_REQUIRE(root.requires_grad(),
             "backward(): the tensor does not require grad and has no grad_fn");
  Tensor seed = grad;
  if (!seed.defined()) {
    SJ_REQUIRE(root.numel() == 1,
               "backward() without a gradient needs a scalar output, got shape ",
               ir::ShapeToString(root.shape()));
    // Marked, so that a traced step's seed can be found by the grad-scaler pass.
    seed = runtime::Dispatch(ir::OpId::kFull, {},
                    {{ir::AttrKey::kShape, std::vector<int64_t>(root.shape().begin(), root.shape().end())},
                     {ir::AttrKey::kValue, 1.0},
                     {ir::AttrKey::kDTypeAttr, root.dtype()},
                     {ir::AttrKey::kRole, std::string("grad_seed")}});
  } else {
    SJ_REQUIRE(seed.shape() == root.shape(), "backward(): gradient shape ",
               ir::ShapeToString(seed.shape()), " does not match output shape ",
               ir::ShapeToString(root.shape()));
  }
  NoGradGuard no_grad;
  std::shared_ptr<Node> start = root.grad_fn();
  if (!start) start = root.impl()->autograd->grad_accumulator;
  if (!start) {
    auto acc = std::make_shared<AccumulateGrad>(root.impl_ptr());
    acc->Apply(seed.detach());
    return;
  }
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

}  // namespace stepjit::autograd
