// Tensor methods and factories; every op goes through runtime::Dispatch.
#include "runtime/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <sstream>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/device_runtime.h"
#include "runtime/dispatch.h"
#include "runtime/object_pool.h"
#include "runtime/ops.h"

namespace stepjit {

using ir::AttrKey;
using ir::OpId;
using runtime::Dispatch;

namespace {
std::vector<int64_t> Vec(ShapeRef s) { return {s.begin(), s.end()}; }

double ReadAsDouble(const void* p, DType t) {
  switch (t) {
    case DType::kF32: return *static_cast<const float*>(p);
    case DType::kF64: return *static_cast<const double*>(p);
    case DType::kF16: return static_cast<float>(*static_cast<const ir::Half*>(p));
    case DType::kBF16: return static_cast<float>(*static_cast<const ir::BFloat16*>(p));
    case DType::kI64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::kI32: return *static_cast<const int32_t*>(p);
    case DType::kBool: return *static_cast<const bool*>(p) ? 1.0 : 0.0;
  }
  return 0;
}
}  // namespace

int64_t Tensor::size(int64_t d) const {
  int64_t w = ir::WrapDim(d, dim());
  SJ_REQUIRE(w >= 0 && dim() > 0, "size(", d, "): dim out of range for shape ",
             ir::ShapeToString(shape()));
  return shape()[w];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  SJ_REQUIRE(!impl_->storage->is_meta(), "a shape-only (meta) ", ir::DTypeName(dtype()),
             ir::ShapeToString(shape()), " tensor has no data to read or write");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * element_size();
}

Tensor Tensor::view(ShapeRef shape) const {
  return Dispatch(OpId::kReshape, {*this}, {{AttrKey::kShape, Vec(shape)}});
}
Tensor Tensor::reshape(ShapeRef shape) const {
  // A view where the layout allows one, else a copy, decided without an
  // exception (reshape runs on every call of a compiled step's recording).
  // A bad shape goes to view(), whose error names it.
  Shape resolved(shape.begin(), shape.end());
  int inferred = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] >= 0) continue;
    if (resolved[i] != -1 || inferred >= 0) return view(shape);
    inferred = static_cast<int>(i);
    resolved[i] = 1;
  }
  const absl::StatusOr<int64_t> known = ir::CheckedNumElements(resolved);
  if (!known.ok() || (inferred >= 0 && (*known == 0 || numel() % *known != 0)))
    return view(shape);
  if (inferred >= 0) resolved[inferred] = numel() / *known;
  if (ir::CheckedNumElements(resolved).value_or(-1) != numel() ||
      runtime::ViewStrides(this->shape(), strides(), resolved).has_value())
    return view(shape);
  return contiguous().view(shape);
}
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  int64_t s = ir::WrapDim(start_dim, dim()), e = ir::WrapDim(end_dim, dim());
  SJ_REQUIRE(s >= 0 && e >= 0 && s <= e, "flatten(", start_dim, ", ", end_dim,
             "): dims out of range for shape ", ir::ShapeToString(shape()));
  if (dim() == 0) return reshape({1});
  Shape out(shape().begin(), shape().begin() + s);
  int64_t n = 1;
  for (int64_t i = s; i <= e; ++i) n *= shape()[i];
  out.push_back(n);
  out.insert(out.end(), shape().begin() + e + 1, shape().end());
  return reshape(out);
}
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  int64_t a = ir::WrapDim(dim0, dim()), b = ir::WrapDim(dim1, dim());
  SJ_REQUIRE(a >= 0 && b >= 0, "transpose(", dim0, ", ", dim1,
             "): dims out of range for shape ", ir::ShapeToString(shape()));
  std::vector<int64_t> perm(dim());
  for (int64_t i = 0; i < dim(); ++i) perm[i] = i;
  if (dim() > 0) std::swap(perm[a], perm[b]);
  return permute(perm);
}
Tensor Tensor::permute(ShapeRef dims) const {
  return Dispatch(OpId::kPermute, {*this}, {{AttrKey::kDims, Vec(dims)}});
}
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return Dispatch(OpId::kSlice, {*this},
                  {{AttrKey::kDim, dim}, {AttrKey::kStart, start},
                   {AttrKey::kEnd, end}, {AttrKey::kStep, step}});
}
Tensor Tensor::expand(ShapeRef shape) const {
  return Dispatch(OpId::kExpand, {*this}, {{AttrKey::kShape, Vec(shape)}});
}
Tensor Tensor::squeeze() const {
  return Dispatch(OpId::kSqueeze, {*this}, {{AttrKey::kDims, std::vector<int64_t>{}}});
}
Tensor Tensor::squeeze(int64_t d) const {
  SJ_REQUIRE(ir::WrapDim(d, dim()) >= 0, "squeeze(", d,
             "): dim out of range for shape ", ir::ShapeToString(shape()));
  return Dispatch(OpId::kSqueeze, {*this}, {{AttrKey::kDims, std::vector<int64_t>{d}}});
}
Tensor Tensor::unsqueeze(int64_t d) const {
  return Dispatch(OpId::kUnsqueeze, {*this}, {{AttrKey::kDim, d}});
}

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : Dispatch(OpId::kContiguous, {*this});
}
Tensor Tensor::clone() const { return Dispatch(OpId::kContiguous, {*this}); }
Tensor Tensor::to(DType dtype) const {
  return dtype == this->dtype() ? *this : cast(*this, dtype);
}
Tensor Tensor::to(Device device, bool non_blocking) const {
  if (device == this->device()) return *this;
  // Copies between devices are not ops of the graph: a traced step breaks
  // there (and runs eagerly) rather than replaying a stale copy.
  if (auto* obs = runtime::GetDispatchObserver()) {
    obs->OnHostRead(*this, device.is_cpu() ? "to(cpu)" : "to(cuda)");
  }
  SJ_REQUIRE(!storage()->is_meta(), "a shape-only (meta) tensor cannot be copied to ",
             device.str());
  return runtime::TransferTensor(*this, device, non_blocking);
}

Tensor Tensor::pin_memory() const {
  SJ_REQUIRE(device().is_cpu(), "pin_memory(): the tensor is on ", device().str(),
             "; only CPU tensors can be pinned");
  if (is_pinned()) return *this;
  auto storage = std::make_shared<Storage>(numel() * element_size(), Device::cpu(),
                                           /*pinned=*/true);
  Tensor out = MakeTensor(storage, shape(), ir::ContiguousStrides(shape()), 0, dtype());
  runtime::GetDeviceRuntime(DeviceType::kCPU).copy_into(out, *this);
  return out;
}

namespace {
// `t` readable by the host (CUDA tensors are copied over).
Tensor HostReadable(const Tensor& t) {
  SJ_REQUIRE(!t.storage()->is_meta(), "a shape-only (meta) ", ir::DTypeName(t.dtype()),
             ir::ShapeToString(t.shape()), " tensor has no value to read to the host");
  return t.device().is_cpu() ? t : runtime::TransferTensor(t, Device::cpu());
}
}  // namespace

double Tensor::item() const {
  SJ_REQUIRE(numel() == 1, "item() needs a tensor with one element, got shape ",
             ir::ShapeToString(shape()));
  if (auto* obs = runtime::GetDispatchObserver()) obs->OnHostRead(*this, "item()");
  return ReadAsDouble(HostReadable(*this).data_ptr(), dtype());
}

namespace {
// Integer dtypes exactly (an int64 above 2^53 has no exact double).
bool ReadAsInteger(const void* p, DType t, int64_t* out) {
  switch (t) {
    case DType::kI64:
      *out = *static_cast<const int64_t*>(p);
      return true;
    case DType::kI32:
      *out = *static_cast<const int32_t*>(p);
      return true;
    case DType::kBool:
      *out = *static_cast<const bool*>(p) ? 1 : 0;
      return true;
    default:
      return false;
  }
}

template <typename T>
const char* ItemTypeName() {
  if constexpr (std::is_same_v<T, float>) return "float";
  if constexpr (std::is_same_v<T, double>) return "double";
  if constexpr (std::is_same_v<T, int64_t>) return "int64_t";
  if constexpr (std::is_same_v<T, int32_t>) return "int32_t";
  if constexpr (std::is_same_v<T, bool>) return "bool";
}
}  // namespace

template <typename T>
T Tensor::item() const {
  SJ_REQUIRE(defined(), "item<", ItemTypeName<T>(),
             ">() of an undefined tensor");
  SJ_REQUIRE(numel() == 1, "item<", ItemTypeName<T>(),
             ">() needs a tensor with one element, got ",
             ir::DTypeName(dtype()), ir::ShapeToString(shape()));
  if (auto* obs = runtime::GetDispatchObserver())
    obs->OnHostRead(*this, "item()");
  const Tensor host = HostReadable(*this);
  const void* p = host.data_ptr();
  int64_t i = 0;
  const bool integral = ReadAsInteger(p, dtype(), &i);
  const double d = integral ? static_cast<double>(i) : ReadAsDouble(p, dtype());
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(d);
  } else {
    const auto value_text = [&] {
      return integral ? absl::StrCat(i) : absl::StrCat(d);
    };
    if constexpr (std::is_same_v<T, bool>) {
      SJ_REQUIRE(d == 0.0 || d == 1.0, "item<bool>(): the ",
                 ir::DTypeName(dtype()), " value ", value_text(),
                 " is neither 0 nor 1");
      return d == 1.0;
    } else {
      if (!integral) {
        // 2^63 is exactly representable and one past int64's range.
        const bool in_range =
            d >= static_cast<double>(std::numeric_limits<T>::min()) &&
            d < -2.0 * static_cast<double>(std::numeric_limits<T>::min() / 2);
        SJ_REQUIRE(std::isfinite(d) && d == std::floor(d) && in_range, "item<",
                   ItemTypeName<T>(), ">(): the ", ir::DTypeName(dtype()),
                   " value ", d, " is not an integer in the range of ",
                   ItemTypeName<T>());
        return static_cast<T>(d);
      }
      SJ_REQUIRE(i >= std::numeric_limits<T>::min() &&
                     i <= std::numeric_limits<T>::max(),
                 "item<", ItemTypeName<T>(), ">(): the ",
                 ir::DTypeName(dtype()), " value ", i,
                 " is out of the range of ", ItemTypeName<T>());
      return static_cast<T>(i);
    }
  }
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template int32_t Tensor::item<int32_t>() const;
template bool Tensor::item<bool>() const;

template <typename T>
std::vector<T> Tensor::to_vector() const {
  if (auto* obs = runtime::GetDispatchObserver()) obs->OnHostRead(*this, "to_vector()");
  Tensor c = HostReadable(*this).contiguous();
  const T* p = c.data<T>();
  SJ_REQUIRE(sizeof(T) == static_cast<size_t>(element_size()),
             "to_vector: element type size ", sizeof(T), " does not match dtype ",
             ir::DTypeName(dtype()));
  return std::vector<T>(p, p + numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;

namespace {
// Nested brackets as PyTorch prints them; dims longer than 6 show their first
// and last 3 entries around "...".
void PrintDim(std::ostream& os, const Tensor& t, int64_t dim, int64_t offset) {
  if (t.dim() == 0) {
    os << ReadAsDouble(static_cast<char*>(t.data_ptr()), t.dtype());
    return;
  }
  const int64_t n = t.shape()[dim];
  const bool summarize = n > 6;
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && i == 3) {
      os << "...";
      i = n - 3;
      os << (dim + 1 == t.dim() ? ", " : ",\n" + std::string(dim + 8, ' '));
    }
    const int64_t off = offset + i * t.strides()[dim];
    if (dim + 1 == t.dim()) {
      os << ReadAsDouble(static_cast<char*>(t.storage()->data()) + off * t.element_size(),
                         t.dtype());
    } else {
      PrintDim(os, t, dim + 1, off);
    }
    if (i + 1 < n) os << (dim + 1 == t.dim() ? ", " : ",\n" + std::string(dim + 8, ' '));
  }
  os << "]";
}
}  // namespace

std::string Tensor::ToString() const {
  if (!defined()) return "tensor(undefined)";
  if (auto* obs = runtime::GetDispatchObserver()) obs->OnHostRead(*this, "printing");
  std::ostringstream os;
  os.precision(6);
  os << "tensor(";
  const Tensor host = HostReadable(*this);
  PrintDim(os, host, 0, host.offset());
  os << ", dtype=" << ir::DTypeName(dtype()) << ", shape=" << ir::ShapeToString(shape());
  if (!device().is_cpu()) os << ", device=" << device().str();
  if (requires_grad()) os << ", requires_grad";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.ToString(); }

bool Tensor::requires_grad() const {
  return impl_->autograd != nullptr && impl_->autograd->requires_grad;
}
Tensor& Tensor::set_requires_grad(bool requires_grad) {
  SJ_REQUIRE(!requires_grad || ir::IsFloating(dtype()),
             "only floating-point tensors can require grad, got ",
             ir::DTypeName(dtype()));
  SJ_REQUIRE(is_leaf(), "set_requires_grad: only leaf tensors (no grad_fn) can change it");
  if (!impl_->autograd) impl_->autograd = std::make_unique<AutogradMeta>();
  impl_->autograd->requires_grad = requires_grad;
  return *this;
}
bool Tensor::is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }
Tensor Tensor::grad() const {
  Tensor g;
  if (impl_->autograd && impl_->autograd->grad)
    g = Tensor(impl_->autograd->grad);
  if (auto* obs = runtime::GetDispatchObserver()) obs->OnGradRead(*this, g);
  return g;
}
void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    SJ_REQUIRE(grad.shape() == shape() && grad.dtype() == dtype(),
               "set_grad: gradient ", ir::DTypeName(grad.dtype()),
               ir::ShapeToString(grad.shape()), " does not match tensor ",
               ir::DTypeName(dtype()), ir::ShapeToString(shape()));
  }
  if (auto* obs = runtime::GetDispatchObserver()) obs->OnGradSet(*this, grad);
  if (!impl_->autograd) impl_->autograd = std::make_unique<AutogradMeta>();
  impl_->autograd->grad = grad.impl_ptr();
}
const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> kNone;
  return impl_->autograd ? impl_->autograd->grad_fn : kNone;
}
Tensor Tensor::detach() const {
  Tensor alias = MakeTensor(impl_->storage, shape(), strides(), offset(), dtype());
  if (auto* obs = runtime::GetDispatchObserver()) obs->OnAlias(*this, alias);
  return alias;
}
void Tensor::backward(const Tensor& gradient) const { autograd::Backward(*this, gradient); }

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  Dispatch(OpId::kAddInplace, {*this, other}, {{AttrKey::kAlpha, alpha}});
  return *this;
}
Tensor& Tensor::mul_(const Tensor& other) {
  Dispatch(OpId::kMulInplace, {*this, other});
  return *this;
}
Tensor& Tensor::mul_(double value) { return mul_(wrap_scalar(value, *this)); }
Tensor& Tensor::addcmul_(const Tensor& t1, const Tensor& t2, double value) {
  Dispatch(OpId::kAddcmulInplace, {*this, t1, t2}, {{AttrKey::kValue, value}});
  return *this;
}
Tensor& Tensor::addcdiv_(const Tensor& t1, const Tensor& t2, double value) {
  Dispatch(OpId::kAddcdivInplace, {*this, t1, t2}, {{AttrKey::kValue, value}});
  return *this;
}
Tensor& Tensor::lerp_(const Tensor& end, const Tensor& weight) {
  Dispatch(OpId::kLerpInplace, {*this, end, weight});
  return *this;
}
Tensor& Tensor::lerp_(const Tensor& end, double weight) {
  return lerp_(end, wrap_scalar(weight, *this));
}
Tensor& Tensor::copy_(const Tensor& src) {
  Dispatch(OpId::kCopyInplace, {*this, src});
  return *this;
}
Tensor& Tensor::fill_(double value) {
  Dispatch(OpId::kFillInplace, {*this}, {{AttrKey::kValue, value}});
  return *this;
}

namespace {
std::atomic<uint64_t> g_parameter_epoch{0};
}  // namespace
void MarkOwnedState(const Tensor& t) { t.impl()->owned_state = true; }
uint64_t ParameterEpoch() { return g_parameter_epoch.load(std::memory_order_relaxed); }
void BumpParameterEpoch() { g_parameter_epoch.fetch_add(1, std::memory_order_relaxed); }

Tensor MakeTensor(std::shared_ptr<Storage> storage, ShapeRef shape, ShapeRef strides,
                  int64_t offset, DType dtype) {
  auto impl =
      std::allocate_shared<TensorImpl>(runtime::PoolAllocator<TensorImpl>{});
  impl->storage = std::move(storage);
  impl->shape.assign(shape.begin(), shape.end());
  impl->strides.assign(strides.begin(), strides.end());
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty(ShapeRef shape, TensorOptions options) {
  const absl::StatusOr<int64_t> numel = ir::CheckedNumElements(shape);
  SJ_REQUIRE(numel.ok(), "empty: ", numel.status().message());
  auto storage = std::allocate_shared<Storage>(
      runtime::PoolAllocator<Storage>{}, *numel * ir::DTypeSize(options.dtype),
      options.device);
  Tensor t = MakeTensor(std::move(storage), shape, ir::ContiguousStrides(shape), 0,
                        options.dtype);
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor full(ShapeRef shape, double value, TensorOptions options) {
  runtime::FactoryDeviceGuard device(options.device);
  Tensor t = Dispatch(OpId::kFull, {},
                      {{AttrKey::kShape, Vec(shape)}, {AttrKey::kValue, value},
                       {AttrKey::kDTypeAttr, options.dtype}});
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}
Tensor zeros(ShapeRef shape, TensorOptions options) { return full(shape, 0.0, options); }
Tensor ones(ShapeRef shape, TensorOptions options) { return full(shape, 1.0, options); }
Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }
Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor ones_like(const Tensor& t) {
  return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor empty_like(const Tensor& t) {
  return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}

Tensor arange(double end, TensorOptions options) { return arange(0, end, 1, options); }
Tensor arange(double start, double end, double step, TensorOptions options) {
  SJ_REQUIRE(step != 0, "arange: step must be non-zero");
  const double count = std::ceil((end - start) / step);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  runtime::FactoryDeviceGuard device(options.device);
  return Dispatch(OpId::kArange, {},
                  {{AttrKey::kShape, std::vector<int64_t>{n}}, {AttrKey::kStart, start},
                   {AttrKey::kStep, step}, {AttrKey::kDTypeAttr, options.dtype}});
}

namespace {
template <typename T>
Tensor FromHost(const std::vector<T>& values, ShapeRef shape, TensorOptions options,
                DType host_dtype) {
  SJ_REQUIRE(static_cast<int64_t>(values.size()) == ir::NumElements(shape),
             "from_vector: ", values.size(), " values do not fill shape ",
             ir::ShapeToString(shape), " (", ir::NumElements(shape), " elements)");
  Tensor t = empty(shape, {.dtype = host_dtype});
  std::copy(values.begin(), values.end(), t.data<T>());
  if (options.dtype != host_dtype) t = t.to(options.dtype);
  if (!options.device.is_cpu()) t = runtime::TransferTensor(t, options.device);
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}
}  // namespace

Tensor from_blob(const void* data, ShapeRef shape, TensorOptions options) {
  const absl::StatusOr<int64_t> numel = ir::CheckedNumElements(shape);
  SJ_REQUIRE(numel.ok(), "from_blob: ", numel.status().message());
  SJ_REQUIRE(data != nullptr || *numel == 0,
             "from_blob: data is null but shape ", ir::ShapeToString(shape),
             " has ", *numel, " elements");
  const int64_t nbytes = *numel * ir::DTypeSize(options.dtype);
  if (options.dtype == DType::kBool) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    for (int64_t i = 0; i < nbytes; ++i) {
      SJ_REQUIRE(bytes[i] <= 1, "from_blob: bool element ", i, " is byte ",
                 static_cast<int>(bytes[i]), "; expected 0 or 1");
    }
  }
  Tensor t = empty(shape, {.dtype = options.dtype});
  if (nbytes > 0) std::memcpy(t.data_ptr(), data, static_cast<size_t>(nbytes));
  if (!options.device.is_cpu()) t = runtime::TransferTensor(t, options.device);
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor from_vector(const std::vector<float>& values, ShapeRef shape, TensorOptions options) {
  return FromHost(values, shape, options, DType::kF32);
}
Tensor from_vector(const std::vector<double>& values, ShapeRef shape, TensorOptions options) {
  return FromHost(values, shape, options, DType::kF64);
}
Tensor from_vector(const std::vector<int64_t>& values, ShapeRef shape, TensorOptions options) {
  return FromHost(values, shape, options, DType::kI64);
}

}  // namespace stepjit
