// Tensor: a strided view of shared storage, with dtype, device and autograd state.
#ifndef STEPJIT_RUNTIME_TENSOR_H_
#define STEPJIT_RUNTIME_TENSOR_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "ir/dtype.h"
#include "ir/shape.h"
#include "ir/status.h"
#include "runtime/device.h"
#include "runtime/storage.h"

namespace stepjit {

using ir::DType;
using ir::Shape;
using ir::ShapeRef;

namespace autograd {
class Node;
}

struct TensorOptions {
  DType dtype = DType::kF32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

class Tensor;
struct TensorImpl;

// Autograd bookkeeping, present only on tensors that take part in autograd.
struct AutogradMeta {
  bool requires_grad = false;
  // The leaf's gradient (.grad): its tensor's impl, so that binding one
  // allocates nothing.
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;     // producer for non-leaves
  std::shared_ptr<autograd::Node> grad_accumulator;  // cached for leaves
  // Leaves only: run, in registration order, each time backward has
  // accumulated into .grad (autograd::AddPostAccumulateGradHook). Kept here,
  // not on an AccumulateGrad node: those are made lazily, and afresh when the
  // leaf itself is the root of a backward.
  std::vector<std::pair<int, std::function<void(const Tensor& leaf)>>>
      post_accumulate_hooks;
};

struct TensorImpl {
  // (Ordered so that what a recording call reads of a tensor it only looks
  // up, its storage, observer slot, dtype, flags and autograd meta, shares
  // the first cache line with the shared_ptr control block.)
  std::shared_ptr<Storage> storage;
  mutable ObserverSlot observer;  // the tracer's (runtime/storage.h)
  DType dtype = DType::kF32;
  // Set by the owner of long-lived state (module parameters, optimizer and
  // scaler state) that only ever updates it in place: a compiled step may
  // bind it by identity. Other tensors a step captures could be rebound by
  // the user without any guard seeing it (frontend/guards.h).
  bool owned_state = false;
  // Set when its owner put another tensor in its place
  // (Module::replace_parameter): a compiled step that binds it by identity
  // would no longer update what the module holds (frontend/guards.h).
  bool replaced = false;
  std::unique_ptr<AutogradMeta> autograd;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
};

class Tensor {
 public:
  Tensor() = default;  // undefined
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  const Shape& shape() const { return impl_->shape; }
  const Shape& sizes() const { return impl_->shape; }
  const Shape& strides() const { return impl_->strides; }
  int64_t offset() const { return impl_->offset; }
  int64_t dim() const { return static_cast<int64_t>(impl_->shape.size()); }
  int64_t size(int64_t d) const;
  int64_t numel() const { return ir::NumElements(impl_->shape); }
  int64_t element_size() const { return ir::DTypeSize(dtype()); }
  bool is_contiguous() const;

  // Pointer to element 0 of this view (storage base + offset).
  void* data_ptr() const;
  template <typename T>
  T* data() const { return static_cast<T*>(data_ptr()); }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // Gives up its impl (the tensor is undefined after).
  std::shared_ptr<TensorImpl> release_impl() && { return std::move(impl_); }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  uint64_t version() const { return impl_->storage->version(); }

  // Views (no copy; `reshape` copies only when strides forbid a view).
  Tensor view(ShapeRef shape) const;
  Tensor reshape(ShapeRef shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(ShapeRef dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor expand(ShapeRef shape) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;

  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  // A copy on `device` (this tensor when already there). With non_blocking
  // the copy may still be running on return when the host side is pinned
  // (a CUDA-to-CPU copy then returns pinned memory): synchronize the stream
  // before reading it.
  Tensor to(Device device, bool non_blocking = false) const;
  // A copy in page-locked host memory (CPU tensors; needs a CUDA backend),
  // from which copies to a GPU run asynchronously.
  Tensor pin_memory() const;
  bool is_pinned() const { return impl_->storage->pinned(); }

  // Host reads (CUDA tensors are copied to the host first).
  double item() const;
  // The one element as T: float, double, int64_t, int32_t or bool. Throws
  // Error when numel() != 1 or the value has no exact T: an integer T takes
  // only integral values in its range (2.5 or 1e20 as int64_t fail; integer
  // dtypes are read exactly, never through a double), bool only 0 and 1; a
  // floating T takes any value, rounded to nearest (inf and NaN stay).
  template <typename T>
  T item() const;
  template <typename T>
  std::vector<T> to_vector() const;  // T must match dtype's storage type
  std::string ToString() const;

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool requires_grad);
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  Tensor detach() const;  // shares storage, no autograd history
  void backward(const Tensor& gradient = Tensor()) const;

  // In-place updates (bump the version counter).
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(const Tensor& other) { return add_(other, -1.0); }
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& addcmul_(const Tensor& t1, const Tensor& t2, double value = 1.0);
  Tensor& addcdiv_(const Tensor& t1, const Tensor& t2, double value = 1.0);
  Tensor& lerp_(const Tensor& end, const Tensor& weight);
  Tensor& lerp_(const Tensor& end, double weight);
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Makes a fresh tensor around new storage (contiguous, uninitialized).
Tensor empty(ShapeRef shape, TensorOptions options = {});
Tensor zeros(ShapeRef shape, TensorOptions options = {});
Tensor ones(ShapeRef shape, TensorOptions options = {});
Tensor full(ShapeRef shape, double value, TensorOptions options = {});
Tensor scalar_tensor(double value, TensorOptions options = {});
Tensor arange(double end, TensorOptions options = {.dtype = DType::kI64});
Tensor arange(double start, double end, double step = 1.0,
              TensorOptions options = {.dtype = DType::kI64});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
// Copies host values into a new tensor; `shape` must match values.size().
Tensor from_vector(const std::vector<float>& values, ShapeRef shape,
                   TensorOptions options = {});
Tensor from_vector(const std::vector<double>& values, ShapeRef shape,
                   TensorOptions options = {.dtype = DType::kF64});
Tensor from_vector(const std::vector<int64_t>& values, ShapeRef shape,
                   TensorOptions options = {.dtype = DType::kI64});

// A new tensor holding a copy of numel(shape) elements of options.dtype
// read from host memory at `data` (row-major, native byte order), on
// options.device. It copies, unlike torch::from_blob, which borrows: a
// stepjit tensor owns its storage (aligned, counted, possibly bound by a
// compiled step as state), so `data` may be freed as soon as this returns.
// BOOL data must hold only bytes 0 and 1.
Tensor from_blob(const void* data, ShapeRef shape, TensorOptions options = {});

// Marks `t` as state its owner updates only in place (TensorImpl::owned_state).
void MarkOwnedState(const Tensor& t);
// Counts replacements of module parameters, in any module (DDP rechecks its
// hooks when it moved; a compiled step checks TensorImpl::replaced of its
// own state instead).
uint64_t ParameterEpoch();
void BumpParameterEpoch();

// A view over existing storage (used by views and by data loaders).
Tensor MakeTensor(std::shared_ptr<Storage> storage, ShapeRef shape,
                  ShapeRef strides, int64_t offset, DType dtype);

}  // namespace stepjit

#endif  // STEPJIT_RUNTIME_TENSOR_H_
