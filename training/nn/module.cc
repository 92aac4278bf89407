// nn::Module: registration, recursive traversal, in-place device/dtype moves.
#include "training/nn/module.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "runtime/amp/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/dispatch.h"

namespace stepjit::nn {
namespace {

// Points `dst`'s impl at `src`'s data, keeping dst's impl object (and with it
// every handle, autograd meta and requires_grad) alive and unchanged.
void ReplaceContents(const Tensor& dst, const Tensor& src) {
  TensorImpl* impl = dst.impl();
  const TensorImpl* from = src.impl();
  impl->storage = from->storage;
  impl->shape = from->shape;
  impl->strides = from->strides;
  impl->offset = from->offset;
  impl->dtype = from->dtype;
}

// Converts each parameter and its grad with `convert`, in place.
void ConvertInPlace(const std::vector<Tensor>& params,
                    const std::function<Tensor(const Tensor&)>& convert) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    const Tensor grad = p.grad();
    ReplaceContents(p, convert(p.detach()));
    if (grad.defined()) ReplaceContents(grad, convert(grad.detach()));
  }
}

}  // namespace

bool DescribeModule(const Module* module, std::vector<uint64_t>& key,
                    runtime::RoutineTensors& tensors) {
  return module != nullptr && module->DescribeForward(key, tensors);
}

void DescribeOptional(const Tensor& tensor, std::vector<uint64_t>& key,
                      runtime::RoutineTensors& tensors) {
  key.push_back(tensor.defined());
  if (tensor.defined()) tensors.Add(tensor);
}

Tensor Module::RecordedForward(const Tensor& input,
                               absl::FunctionRef<Tensor()> body) const {
  if (!runtime::RecordedResultRoutine::Active()) return body();
  // Per thread, so that a recording call allocates nothing here after the
  // first; free again once the routine has begun (it copies what it
  // keeps).
  thread_local std::vector<uint64_t> key;
  thread_local runtime::RoutineTensors tensors;
  key.clear();
  tensors.clear();
  tensors.Add(input);
  if (!DescribeForward(key, tensors)) {
    tensors.clear();
    return body();
  }
  // What every op's dispatch reads besides its operands, and what decides
  // the backward nodes: grad mode, autocast, the factory device, and each
  // tensor's requires_grad and device.
  const Device factory = runtime::FactoryDevice();
  key.insert(key.end(), {uint64_t{GradMode::is_enabled()},
                         uint64_t{amp::IsAutocastEnabled()},
                         static_cast<uint64_t>(amp::AutocastDType()),
                         static_cast<uint64_t>(factory.type) << 32 |
                             static_cast<uint32_t>(factory.index)});
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorImpl& t = *tensors.impl(i);
    const Device d = t.storage->device();
    const bool requires_grad =
        t.autograd != nullptr && t.autograd->requires_grad;
    key.push_back(uint64_t{requires_grad} | static_cast<uint64_t>(d.type) << 1 |
                  static_cast<uint64_t>(static_cast<uint32_t>(d.index)) << 8);
  }
  runtime::RecordedResultRoutine routine(key, tensors);
  tensors.clear();
  if (routine.skipped()) return routine.result();
  return routine.Finish(body());
}

Tensor Module::forward(const Tensor& input) {
  throw Error("nn::Module::forward(Tensor) is not implemented by this module");
}

void Module::CheckNewName(const std::string& name, const char* what) const {
  SJ_REQUIRE(!name.empty(), what, " name must not be empty");
  SJ_REQUIRE(name.find('.') == std::string::npos, what, " name '", name,
             "' must not contain '.'");
  const auto same = [&](const auto& entry) { return entry.first == name; };
  SJ_REQUIRE(std::none_of(parameters_.begin(), parameters_.end(), same) &&
                 std::none_of(buffers_.begin(), buffers_.end(), same) &&
                 std::none_of(children_.begin(), children_.end(), same),
             what, " name '", name, "' is already registered in this module");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor,
                                  bool requires_grad) {
  CheckNewName(name, "parameter");
  SJ_REQUIRE(tensor.defined(), "parameter '", name, "' is undefined");
  SJ_REQUIRE(!requires_grad || ir::IsFloating(tensor.dtype()), "parameter '",
             name, "' of dtype ", std::string(ir::DTypeName(tensor.dtype())),
             " cannot require grad (floating-point dtypes only)");
  // A parameter is a leaf: drop any history the caller built it with.
  if (!tensor.is_leaf()) tensor = tensor.detach();
  tensor.set_requires_grad(requires_grad);
  MarkOwnedState(tensor);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  CheckNewName(name, "buffer");
  SJ_REQUIRE(tensor.defined(), "buffer '", name, "' is undefined");
  if (!tensor.is_leaf() || tensor.requires_grad()) tensor = tensor.detach();
  MarkOwnedState(tensor);
  buffers_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::replace_parameter(const std::string& name, Tensor tensor) {
  for (auto& [n, t] : parameters_) {
    if (n != name) continue;
    SJ_REQUIRE(tensor.defined(), "replace_parameter: '", name, "' would become undefined");
    if (!tensor.is_leaf()) tensor = tensor.detach();
    tensor.set_requires_grad(t.requires_grad());
    MarkOwnedState(tensor);
    if (t.impl() != tensor.impl()) t.impl()->replaced = true;
    tensor.impl()->replaced = false;
    t = tensor;
    BumpParameterEpoch();
    OnParameterReplaced(name, tensor);
    return tensor;
  }
  throw Error("replace_parameter: this module has no parameter named '" + name + "'");
}

void Module::AddChild(const std::string& name, std::shared_ptr<Module> child) {
  CheckNewName(name, "submodule");
  SJ_REQUIRE(child != nullptr, "submodule '", name, "' is null");
  children_.emplace_back(name, std::move(child));
}

void Module::CollectParameters(const std::string& prefix, NamedTensors& out,
                               absl::flat_hash_set<const TensorImpl*>* seen,
                               int kinds) const {
  for (const NamedTensors* list : {&parameters_, &buffers_}) {
    if (!(kinds & (list == &parameters_ ? kParameters : kBuffers))) continue;
    for (const auto& [name, tensor] : *list) {
      if (seen == nullptr || seen->insert(tensor.impl()).second)
        out.emplace_back(prefix + name, tensor);
    }
  }
}

void Module::CollectAll(bool recurse,
                        absl::flat_hash_set<const TensorImpl*>* seen,
                        NamedTensors& out, int kinds) const {
  CollectParameters("", out, seen, kinds);
  if (!recurse) return;
  // Pre-order over submodules; prefixes accumulate "a.b." as PyTorch's do.
  std::function<void(const Module&, const std::string&)> visit =
      [&](const Module& m, const std::string& prefix) {
        for (const auto& [name, child] : m.children_) {
          const std::string child_prefix = prefix + name + ".";
          child->CollectParameters(child_prefix, out, seen, kinds);
          visit(*child, child_prefix);
        }
      };
  visit(*this, "");
}

Module::NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  absl::flat_hash_set<const TensorImpl*> seen;
  CollectAll(recurse, &seen, out);
  return out;
}

Module::NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  absl::flat_hash_set<const TensorImpl*> seen;
  CollectAll(recurse, &seen, out, kBuffers);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(std::move(t));
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  CollectAll(/*recurse=*/true, /*seen=*/nullptr, out, kParameters | kBuffers);
  for (auto& [name, t] : out) t = t.detach();
  return out;
}

absl::StatusOr<LoadPlan> Module::PlanLoad(const NamedTensors& state) const {
  NamedTensors expected;
  CollectAll(/*recurse=*/true, /*seen=*/nullptr, expected,
             kParameters | kBuffers);
  absl::flat_hash_set<std::string> expected_names, given;
  for (const auto& [name, t] : expected) expected_names.insert(name);
  std::vector<std::string> missing, unexpected, duplicate, mismatched;
  for (const auto& [name, t] : state) {
    if (!given.insert(name).second) duplicate.push_back(name);
    if (!expected_names.contains(name)) unexpected.push_back(name);
  }
  LoadPlan plan;
  for (const auto& [name, param] : expected) {
    const Tensor* found = nullptr;
    for (const auto& [n, t] : state) {
      if (n == name) found = &t;
    }
    if (found == nullptr) {
      missing.push_back(name);
      continue;
    }
    if (absl::Status s = CheckLoadable(name, param, *found); !s.ok()) {
      mismatched.emplace_back(s.message());
      continue;
    }
    plan.Copy(param, *found);
  }
  if (missing.empty() && unexpected.empty() && duplicate.empty() &&
      mismatched.empty()) {
    return plan;
  }
  std::string msg =
      "load_state_dict: the state dict does not match the module:";
  if (!missing.empty()) {
    absl::StrAppend(&msg, " missing ", missing.size(), " (", NameList(missing),
                    ");");
  }
  if (!unexpected.empty()) {
    absl::StrAppend(&msg, " unexpected ", unexpected.size(), " (",
                    NameList(unexpected), ");");
  }
  if (!duplicate.empty()) {
    absl::StrAppend(&msg, " given twice: ", NameList(duplicate), ";");
  }
  for (const std::string& m : mismatched) absl::StrAppend(&msg, " ", m, ";");
  msg.pop_back();
  return absl::InvalidArgumentError(msg);
}

absl::Status Module::load_state_dict(const NamedTensors& state) {
  ASSIGN_OR_RETURN(LoadPlan plan, PlanLoad(state));
  plan.Apply();
  return absl::OkStatus();
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters(recurse)) {
    out.push_back(std::move(tensor));
  }
  return out;
}

void Module::to(Device device) {
  ConvertInPlace(parameters(),
                 [device](const Tensor& t) { return t.to(device); });
  ConvertInPlace(buffers(), [device](const Tensor& t) { return t.to(device); });
}

void Module::to(DType dtype) {
  SJ_REQUIRE(ir::IsFloating(dtype),
             "nn::Module::to only accepts floating-point dtypes, got ",
             std::string(ir::DTypeName(dtype)));
  std::vector<Tensor> floating;
  for (const Tensor& p : parameters()) {
    if (ir::IsFloating(p.dtype())) floating.push_back(p);
  }
  ConvertInPlace(floating, [dtype](const Tensor& t) { return t.to(dtype); });
  floating.clear();
  for (const Tensor& b : buffers()) {
    if (ir::IsFloating(b.dtype())) floating.push_back(b);
  }
  ConvertInPlace(floating, [dtype](const Tensor& t) { return t.to(dtype); });
}

bool Module::is_training() const {
  if (auto* obs = runtime::GetDispatchObserver()) obs->OnFlagRead(training_, "module training flag");
  return *training_;
}

void Module::train(bool on) {
  *training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (Tensor grad = p.grad(); grad.defined()) {
      grad.zero_();
    }
  }
}

}  // namespace stepjit::nn
