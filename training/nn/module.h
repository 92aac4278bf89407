// nn::Module (named parameters and submodules) and ModuleHolder (its handle).
//
// Modules live behind std::shared_ptr so that a submodule registered in two
// places, a holder copied into a lambda and an optimizer all refer to the same
// object. Parameters are identified by their TensorImpl: optimizers and the
// tracer bind state by identity, so nothing here ever replaces a parameter's
// impl — `to()` rewrites the impl's contents instead.
#ifndef STEPJIT_TRAINING_NN_MODULE_H_
#define STEPJIT_TRAINING_NN_MODULE_H_

#include <concepts>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "absl/base/casts.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "ir/status.h"
#include "runtime/routine_tensors.h"
#include "runtime/tensor.h"
#include "training/state_dict.h"

namespace stepjit::nn {

class Module;

// For DescribeForward: a module tag in a key, one per library module type.
enum class ModuleTag : uint64_t {
  kLinear = 0x6d6f6401,
  kReLU,
  kTanh,
  kSigmoid,
  kSiLU,
  kGELU,
  kLayerNorm,
  kRMSNorm,
  kDropout,
  kEmbedding,
  kFlatten,
  kSequential,
  kMultiheadAttention,
  kTransformerBlock,
  kGPT,
  kConv2d,
  kMaxPool2d,
  kAvgPool2d,
  kAdaptiveAvgPool2d,
  kBatchNorm2d,
};

// A value type that hands out the shared_ptr of the module it wraps.
template <typename H>
concept ModuleHolderType = requires(const H& h) {
  { h.ptr() } -> std::convertible_to<std::shared_ptr<Module>>;
};

class Module {
 public:
  using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
  using NamedModules =
      std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

  Module() = default;
  virtual ~Module() = default;
  // Copies would share parameter impls while looking independent.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // What decides the ops forward() dispatches besides its input: a library
  // module of exactly its library type (not a subclass, whose code may
  // differ) appends its kind, its options, the flags it reads and its
  // submodules' descriptions to `key`, and every tensor its forward reads
  // (parameters, caches) to `tensors`, and returns true. Any other module
  // returns false: its forward cannot be described. A compiled step's
  // recording check uses this to stand in for a whole forward at once
  // (RecordedForward).
  virtual bool DescribeForward(std::vector<uint64_t>& key,
                               runtime::RoutineTensors& tensors) const {
    return false;
  }

  // Registers `tensor` under `name` (no dots, unique in this module), sets
  // its requires_grad, and returns a handle sharing its impl.
  Tensor register_parameter(const std::string& name, Tensor tensor,
                            bool requires_grad = true);

  // Registers a buffer: state the module keeps and updates in place but
  // does not train (BatchNorm's running statistics). It takes part in
  // state_dict(), load_state_dict(), to() and DDP's broadcast at start, and
  // a compiled step binds it by identity, as a parameter.
  Tensor register_buffer(const std::string& name, Tensor tensor);

  // Rebinds parameter `name` to a different tensor (a new identity): the
  // registry and the layer's handle both change, and compiled steps that
  // captured the old tensor retrace (their identity guard sees the epoch).
  Tensor replace_parameter(const std::string& name, Tensor tensor);

  template <typename M>
    requires std::derived_from<M, Module>
  std::shared_ptr<M> register_module(const std::string& name,
                                     std::shared_ptr<M> module) {
    AddChild(name, module);
    return module;
  }
  template <ModuleHolderType H>
  H register_module(const std::string& name, H holder) {
    AddChild(name, holder.ptr());
    return holder;
  }

  // This module's parameters first, then each child's with a "child."
  // prefix, in registration order (PyTorch's order). A tensor reachable by
  // two names (tied weights) is listed once, under the first.
  NamedTensors named_parameters(bool recurse = true) const;
  // The same tensors as named_parameters(): handles sharing the impls.
  std::vector<Tensor> parameters(bool recurse = true) const;
  // Buffers likewise (after each module's parameters in state_dict()).
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  const NamedModules& named_children() const { return children_; }

  // Every parameter and buffer under PyTorch's state_dict name ("0.weight",
  // "h0.attn.out_proj.bias", "1.running_mean"): each module's parameters,
  // then its buffers, pre-order over the modules; a tied tensor appears
  // under each of its names, as in PyTorch. The handles share the storage
  // and carry no autograd.
  NamedTensors state_dict() const;
  // Copies `state` into the parameters in place: same storage and identity,
  // so compiled steps stay valid. Needs exactly the names of state_dict(),
  // each with its shape (floating dtypes convert into each other); any
  // missing, unexpected or mismatched entry is an error that names them all,
  // and then no parameter has changed.
  absl::Status load_state_dict(const NamedTensors& state);
  // The checking half of load_state_dict (LoadPlan::Apply does the copies).
  absl::StatusOr<LoadPlan> PlanLoad(const NamedTensors& state) const;

  // Convert every parameter (and its grad) and buffer in place; handles
  // held elsewhere see the new device/dtype. to(DType) only touches
  // floating-point tensors.
  void to(Device device);
  void to(DType dtype);

  virtual void train(bool on = true);
  void eval() { train(false); }
  // Reported to the dispatch observer: a compiled step whose trace read it
  // is guarded on its value (a flip selects or traces another specialization).
  bool is_training() const;

  void zero_grad(bool set_to_none = true);

 protected:
  // Runs `body` (this module's forward on `input`) as one recorded routine
  // (runtime::RecordedResultRoutine) when a recording tracer is attached
  // and DescribeForward describes it, so that a recording call that
  // matches its record takes the forward's ops from the record instead of
  // dispatching them; otherwise just runs it.
  Tensor RecordedForward(const Tensor& input,
                         absl::FunctionRef<Tensor()> body) const;

  // Layers that keep a handle to a parameter (e.g. Linear::weight) update
  // it here when replace_parameter rebinds the name.
  virtual void OnParameterReplaced(const std::string& name, const Tensor& tensor) {}

 private:
  void CheckNewName(const std::string& name, const char* what) const;
  void AddChild(const std::string& name, std::shared_ptr<Module> child);
  // What each module holds of `kinds` by name, pre-order; `seen` (when
  // given) drops a tensor reached again under another name.
  enum Kinds { kParameters = 1, kBuffers = 2 };
  void CollectAll(bool recurse, absl::flat_hash_set<const TensorImpl*>* seen,
                  NamedTensors& out, int kinds = kParameters) const;
  void CollectParameters(const std::string& prefix, NamedTensors& out,
                         absl::flat_hash_set<const TensorImpl*>* seen,
                         int kinds) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  NamedModules children_;
  // Shared so that a compiled step's guard can read the flag without
  // keeping the module alive.
  std::shared_ptr<bool> training_ = std::make_shared<bool>(true);
};

// Whether `m` is exactly a T (a subclass may run other code in forward).
template <typename T>
bool IsExactly(const Module& m) {
  return typeid(m) == typeid(T);
}

// DescribeForward of `module`, false when it is null.
bool DescribeModule(const Module* module, std::vector<uint64_t>& key,
                    runtime::RoutineTensors& tensors);
// Appends `tensor` to `tensors` when defined, and whether it is to `key`.
void DescribeOptional(const Tensor& tensor, std::vector<uint64_t>& key,
                      runtime::RoutineTensors& tensors);
// A double option in a key: its bits.
inline uint64_t KeyBits(double v) { return absl::bit_cast<uint64_t>(v); }

// A copyable handle to a shared Impl (libtorch's ModuleHolder): lets users
// write `nn::Linear fc(4, 8); fc(x); fc.parameters(); fc->weight`.
template <typename Impl>
class ModuleHolder {
 public:
  using ContainedType = Impl;

  ModuleHolder()
    requires std::default_initializable<Impl>
      : impl_(std::make_shared<Impl>()) {}
  // Empty, for members that are assigned in a constructor body.
  ModuleHolder(std::nullptr_t) {}
  ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  // Builds a new Impl from constructor arguments; a lone holder argument is a
  // copy, never an Impl argument.
  template <typename First, typename... Rest>
    requires(sizeof...(Rest) > 0 ||
             !std::derived_from<std::remove_cvref_t<First>, ModuleHolder>) &&
            std::constructible_from<Impl, First, Rest...>
  explicit ModuleHolder(First&& first, Rest&&... rest)
      : impl_(std::make_shared<Impl>(std::forward<First>(first),
                                     std::forward<Rest>(rest)...)) {}

  Impl* operator->() const { return &impl(); }
  Impl& operator*() const { return impl(); }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }

  // Calls the Impl's forward with any arguments it declares (several
  // tensors, options...), as libtorch's holders do.
  template <typename... Args>
  auto operator()(Args&&... args) const
      -> decltype(std::declval<Impl&>().forward(std::forward<Args>(args)...)) {
    return impl().forward(std::forward<Args>(args)...);
  }
  Module::NamedTensors named_parameters(bool recurse = true) const {
    return impl().named_parameters(recurse);
  }
  std::vector<Tensor> parameters(bool recurse = true) const {
    return impl().parameters(recurse);
  }
  NamedTensors state_dict() const { return impl().state_dict(); }
  absl::Status load_state_dict(const NamedTensors& state) const {
    return impl().load_state_dict(state);
  }
  void to(Device device) const { impl().to(device); }
  void to(DType dtype) const { impl().to(dtype); }
  void train(bool on = true) const { impl().train(on); }
  void eval() const { impl().eval(); }
  bool is_training() const { return impl().is_training(); }
  void zero_grad(bool set_to_none = true) const {
    impl().zero_grad(set_to_none);
  }

 private:
  Impl& impl() const {
    SJ_REQUIRE(impl_ != nullptr, "use of an empty module holder (",
               "constructed from nullptr and never assigned)");
    return *impl_;
  }

  std::shared_ptr<Impl> impl_;
};

}  // namespace stepjit::nn

#endif  // STEPJIT_TRAINING_NN_MODULE_H_
