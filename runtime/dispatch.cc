// Dispatch: type inference, operand conversion, views, kernels, autograd, observer.
#include "runtime/dispatch.h"

#include <optional>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "ir/infer.h"
#include "ir/op_attrs.h"
#include "ir/status.h"
#include "runtime/amp/autocast.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/device_runtime.h"
#include "runtime/object_pool.h"
#include "runtime/pending.h"
#include "runtime/profiler.h"

namespace stepjit::runtime {

using ir::AttrKey;
using ir::OpId;
using ir::OpKind;

namespace {

thread_local DispatchObserver* t_observer = nullptr;
thread_local Device t_factory_device = Device::cpu();
thread_local bool t_meta = false;

Tensor MakeView(OpId op, const Tensor& x, const ir::Attrs& attrs,
                const ir::TensorType& type) {
  const int64_t rank = x.dim();
  Shape strides;
  int64_t offset = x.offset();
  switch (op) {
    case OpId::kReshape: {
      auto s = ViewStrides(x.shape(), x.strides(), type.shape);
      SJ_REQUIRE(s.has_value(), "view(", ir::ShapeToString(type.shape),
                 "): input of shape ", ir::ShapeToString(x.shape()), " and strides ",
                 ir::ShapeToString(x.strides()),
                 " cannot be viewed without a copy; use reshape()");
      strides = *s;
      break;
    }
    case OpId::kPermute:
      for (int64_t d : attrs.GetInts(AttrKey::kDims)) {
        strides.push_back(x.strides()[ir::WrapDim(d, rank)]);
      }
      break;
    case OpId::kSlice: {
      const int64_t d = ir::WrapDim(attrs.GetInt(AttrKey::kDim), rank);
      int64_t start = attrs.GetInt(AttrKey::kStart);
      if (start < 0) start += x.shape()[d];
      start = std::clamp<int64_t>(start, 0, x.shape()[d]);
      strides = x.strides();
      offset += start * strides[d];
      strides[d] *= ir::GetAttr<OpId::kSlice, AttrKey::kStep>(attrs);
      break;
    }
    case OpId::kExpand: {
      const size_t lead = type.shape.size() - rank;
      strides.assign(type.shape.size(), 0);
      for (int64_t i = 0; i < rank; ++i) {
        strides[lead + i] = x.shape()[i] == type.shape[lead + i] ? x.strides()[i] : 0;
      }
      break;
    }
    case OpId::kSqueeze: {
      std::vector<int64_t> dims = attrs.GetInts(AttrKey::kDims);
      for (int64_t i = 0; i < rank; ++i) {
        bool listed = dims.empty();
        for (int64_t d : dims) listed |= ir::WrapDim(d, rank) == i;
        if (!(listed && x.shape()[i] == 1)) strides.push_back(x.strides()[i]);
      }
      break;
    }
    case OpId::kUnsqueeze: {
      const int64_t d = ir::WrapDim(attrs.GetInt(AttrKey::kDim), rank + 1);
      strides = x.strides();
      int64_t s = d < rank ? x.strides()[d] * x.shape()[d] : 1;
      strides.insert(strides.begin() + d, s);
      break;
    }
    default:
      SJ_CHECK(false, "not a view op: ", ir::OpName(op));
  }
  return MakeTensor(x.storage(), type.shape, strides, offset, type.dtype);
}

// The dtype each operand is converted to before the kernel runs.
ir::DType OperandDType(OpId op, int i, ir::DType dtype,
                       absl::Span<const ir::TensorType> types,
                       const ir::TensorType& out) {
  const OpKind kind = ir::GetOpInfo(op).kind;
  if (kind == OpKind::kInplaceUpdate) {
    return op == OpId::kCopyInplace ? dtype : out.dtype;
  }
  if (op == OpId::kCast) return dtype;
  if (kind != OpKind::kElementwise) {
    // Non-elementwise ops that promote (cat) read their operands in the
    // result dtype; the others read them as they are.
    return ir::GetOpInfo(op).amp == ir::AmpPolicy::kPromote ? out.dtype : dtype;
  }
  if (op == OpId::kWhere) return i == 0 ? dtype : out.dtype;
  if (out.dtype == ir::DType::kBool) return ir::ResultType(types);  // comparisons
  return out.dtype;
}

// True when `a` and `b` share storage but are not the very same view.
bool AliasesDifferently(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() &&
         !(a.offset() == b.offset() && a.shape() == b.shape() &&
           a.strides() == b.strides());
}

// The device every operand must be on (`none` for an op without operands,
// a factory); CPU scalars and copy_'s source may come from elsewhere and are
// moved.
Device CommonDevice(OpId op, absl::Span<const Tensor> inputs, Device none) {
  if (inputs.empty()) return none;
  Device device = inputs[0].device();
  if (op != OpId::kCopyInplace) {
    for (const Tensor& t : inputs) {
      if (t.defined() && !t.device().is_cpu()) {
        device = t.device();
        break;
      }
    }
  }
  // The operand that decided `device`, for the message.
  size_t on = 0;
  while (on + 1 < inputs.size() &&
         !(inputs[on].defined() && inputs[on].device() == device))
    ++on;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || t.device() == device) continue;
    const bool movable = (op == OpId::kCopyInplace && i == 1) ||
                         (t.device().is_cpu() && t.dim() == 0);
    SJ_REQUIRE(
        movable, ir::OpName(op), ": input ", i, " is on ", t.device().str(),
        " but input ", on, " is on ", device.str(),
        "; expected every operand on one device (move it with .to(device))");
  }
  return device;
}

// `inputs` as the kernel of `op` reads them: on `device`, in the dtype
// `want(i)` gives each, and an in-place op's other operands that view its
// target differently (x.copy_(x.t())) as copies, since the kernel would read
// elements it has already overwritten.
template <typename Want>
absl::InlinedVector<Tensor, 4> KernelOperands(OpId op,
                                              absl::Span<const Tensor> inputs,
                                              Device device, Want want) {
  absl::InlinedVector<Tensor, 4> converted(inputs.begin(), inputs.end());
  for (size_t i = 0; i < converted.size(); ++i) {
    Tensor& t = converted[i];
    if (t.device() != device) t = TransferTensor(t, device);
    const ir::DType dtype = want(i);
    const bool overlaps =
        ir::IsInplace(op) && i > 0 && AliasesDifferently(inputs[i], inputs[0]);
    if (dtype != t.dtype() || overlaps) {
      Tensor c = empty(t.shape(), {.dtype = dtype, .device = device});
      GetDeviceRuntime(device.type).copy_into(c, t);
      t = c;
    }
  }
  return converted;
}

// An eager op's span (runtime/profiler.h): on the host, and on the device's
// clock where the device times its own work (the host span then only
// launched it and is not counted).
class OpProfile {
 public:
  OpProfile(OpId op, Device device) : span_(kCatOp) {
    if (ir::GetOpInfo(op).kind != OpKind::kView && !device.is_cpu())
      timer_ = GetDeviceRuntime(device.type).timer;
    if (timer_ != nullptr) device_start_ = timer_->Start();
  }

  void End(OpId op, absl::Span<const ir::TensorType> types,
           const ir::TensorType& out, const ir::Attrs& attrs) {
    TraceEvent device_event;
    device_event.shape = ir::ShapeToString(out.shape);
    device_event.name = absl::StrCat(ir::OpName(op), " ", device_event.shape);
    device_event.cat = kCatOp;
    device_event.work = OpWork(op, types, out, attrs);
    // Views do no work; ops a replayed node runs count as the node.
    device_event.counted =
        ir::GetOpInfo(op).kind != OpKind::kView && !InsideKernel();
    if (span_.active()) {  // not under a CUDA graph capture
      span_.set_name(device_event.name);
      span_.set_work(device_event.work, device_event.shape);
      span_.set_counted(timer_ == nullptr && device_event.counted);
      span_.End();
    }
    if (timer_ != nullptr) timer_->Stop(device_start_, std::move(device_event));
  }

 private:
  ProfileSpan span_;
  DeviceTimer* timer_ = nullptr;
  uint64_t device_start_ = 0;
};

}  // namespace

std::optional<Shape> ViewStrides(ShapeRef old_shape, ShapeRef old_strides,
                                 ShapeRef new_shape) {
  if (ir::NumElements(old_shape) == 0) return ir::ContiguousStrides(new_shape);
  // A 0-d tensor has one element: any all-ones shape views it.
  if (old_shape.empty()) return Shape(new_shape.size(), 1);
  Shape out(new_shape.size());
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 &&
                   old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 &&
             (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

PhiloxStart RandomStart(const KernelArgs& k) {
  const auto offset =
      static_cast<uint64_t>(k.attrs.GetInt(ir::AttrKey::kOffset));
  if (!ir::TakesRandomState(k.op, k.inputs.size())) {
    return {static_cast<uint64_t>(k.attrs.GetInt(ir::AttrKey::kSeed)), offset};
  }
  const Tensor& state = k.inputs.back();
  SJ_CHECK(state.dtype() == DType::kI64 && state.numel() == 2 &&
               state.device().is_cpu(),
           "a random op's state operand must be a host i64[2]");
  const auto* s = state.data<int64_t>();
  return {static_cast<uint64_t>(s[0]), offset + static_cast<uint64_t>(s[1])};
}

CpuKernel GetCpuKernel(OpId op) {
  return GetDeviceRuntime(DeviceType::kCPU).kernels[static_cast<int>(op)];
}

Device FactoryDevice() { return t_factory_device; }
FactoryDeviceGuard::FactoryDeviceGuard(Device device) : previous_(t_factory_device) {
  t_factory_device = device;
}
FactoryDeviceGuard::~FactoryDeviceGuard() { t_factory_device = previous_; }

MetaModeGuard::MetaModeGuard() : previous_(t_meta) { t_meta = true; }
MetaModeGuard::~MetaModeGuard() { t_meta = previous_; }
bool InMetaMode() { return t_meta; }

DispatchObserver* SetDispatchObserver(DispatchObserver* observer) {
  DispatchObserver* prev = t_observer;
  t_observer = observer;
  return prev;
}
DispatchObserver* GetDispatchObserver() { return t_observer; }

Tensor MakeMetaTensor(const ir::TensorType& type, Device device) {
  auto storage = std::allocate_shared<Storage>(
      PoolAllocator<Storage>{}, Storage::MetaTag{},
      ir::NumElements(type.shape) * ir::DTypeSize(type.dtype), device);
  return MakeTensor(std::move(storage), type.shape,
                    ir::ContiguousStrides(type.shape), 0, type.dtype);
}

RecordedRoutine::RecordedRoutine(absl::Span<const uint64_t> key,
                                 const RoutineTensors& tensors)
    : observer_(t_observer) {
  if (observer_ != nullptr)
    skipped_ = observer_->BeginRoutine(key, tensors, nullptr);
}
RecordedRoutine::~RecordedRoutine() {
  if (observer_ != nullptr && !skipped_) observer_->EndRoutine(nullptr);
}

bool RecordedResultRoutine::Active() {
  return t_observer != nullptr && !autograd::RoutineScope::InScope();
}

RecordedResultRoutine::RecordedResultRoutine(absl::Span<const uint64_t> key,
                                             const RoutineTensors& tensors)
    : observer_(t_observer) {
  if (observer_ == nullptr) return;
  skipped_ = observer_->BeginRoutine(key, tensors, &result_);
  if (skipped_) {
    if (result_.requires_grad && GradMode::is_enabled())
      autograd::SetRoutineResult(result_.tensor, result_.place,
                                 tensors.Tensors());
    return;
  }
  scope_.emplace(result_.place, tensors.Tensors());
}

RecordedResultRoutine::~RecordedResultRoutine() {
  // A routine that threw ends unrecorded.
  if (observer_ != nullptr && !skipped_ && !finished_)
    observer_->EndRoutine(nullptr);
}

Tensor RecordedResultRoutine::Finish(Tensor result) {
  if (observer_ == nullptr || skipped_ || finished_) return result;
  finished_ = true;
  if (observer_->EndRoutine(&result)) scope_->Close();
  return result;
}

Tensor Dispatch(OpId op, absl::Span<const Tensor> inputs, const ir::Attrs& attrs) {
  // An operand an async collective is still writing is waited for first
  // (views only restride: their readers wait, as they share the storage).
  if (ir::GetOpInfo(op).kind != OpKind::kView) WaitPending(inputs);
  // Autocast: cast inputs as the op's AmpPolicy asks, through the cast op,
  // so that autograd and the tracer see the casts.
  if (amp::IsAutocastEnabled()) {
    absl::InlinedVector<Tensor, 4> cast;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const ir::DType want = inputs[i].defined()
                                 ? amp::AutocastInputDType(op, inputs[i].dtype())
                                 : ir::DType::kF32;
      if (inputs[i].defined() && want != inputs[i].dtype()) {
        if (cast.empty()) cast.assign(inputs.begin(), inputs.end());
        cast[i] = Dispatch(OpId::kCast, {inputs[i]}, {{AttrKey::kDTypeAttr, want}});
      }
    }
    if (!cast.empty()) return Dispatch(op, cast, attrs);
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    SJ_REQUIRE(inputs[i].defined(), ir::OpName(op), ": input ", i,
               " is an undefined tensor");
  const Device device = CommonDevice(op, inputs, t_factory_device);
  // A recording call that matches its record knows the result type.
  const ir::TensorType* expected =
      t_meta && t_observer != nullptr
          ? t_observer->ExpectedType(op, inputs, attrs)
          : nullptr;
  absl::InlinedVector<ir::TensorType, 4> types;
  if (expected == nullptr) {
    for (const Tensor& t : inputs) types.push_back({t.dtype(), t.shape()});
  }
  const ir::TensorType out_type =
      expected != nullptr ? *expected
                          : ValueOrThrow(ir::InferType(op, types, attrs));
  const ir::OpInfo& info = ir::GetOpInfo(op);
  const bool grad_on = GradMode::is_enabled();
  SJ_REQUIRE(!(ir::IsInplace(op) && grad_on && inputs[0].requires_grad()),
             ir::OpName(op),
             ": a tensor that requires grad is being modified in place while "
             "grad mode is on; wrap the update in NoGradGuard");

  // Engaged only while profiling: otherwise one branch per op.
  std::optional<OpProfile> profile;
  if (ProfilingEnabled() && !t_meta) profile.emplace(op, device);

  Tensor out;
  if (info.kind == OpKind::kView) {
    out = MakeView(op, inputs[0], attrs, out_type);
  } else if (t_meta) {
    if (ir::IsInplace(op)) {
      out = inputs[0];
    } else {
      auto storage = std::allocate_shared<Storage>(
          PoolAllocator<Storage>{}, Storage::MetaTag{},
          ir::NumElements(out_type.shape) * ir::DTypeSize(out_type.dtype),
          device);
      out = MakeTensor(std::move(storage), out_type.shape, ir::ContiguousStrides(out_type.shape),
                       0, out_type.dtype);
    }
  } else {
    const absl::InlinedVector<Tensor, 4> converted =
        KernelOperands(op, inputs, device, [&](size_t i) {
          return OperandDType(op, static_cast<int>(i), inputs[i].dtype(), types,
                              out_type);
        });
    if (ir::IsInplace(op)) {
      out = inputs[0];
    } else {
      out = empty(out_type.shape, {.dtype = out_type.dtype, .device = device});
    }
    GetKernel(op, device)(KernelArgs{op, converted, attrs, out});
    if (ir::IsInplace(op)) out.storage()->BumpVersion();
  }
  if (profile) profile->End(op, types, out_type, attrs);

  // The observer sees the op before autograd saves aliases of its tensors,
  // so that a tracer already knows what those aliases refer to.
  if (t_observer != nullptr) t_observer->OnOp(op, inputs, attrs, out);
  if (grad_on && ir::IsDifferentiable(op)) {
    bool any = false;
    for (const Tensor& t : inputs) any |= t.requires_grad();
    if (any && ir::IsFloating(out.dtype())) autograd::RecordOp(op, inputs, attrs, out);
  }
  return out;
}

PreparedOp::PreparedOp(OpId op, absl::Span<const ir::TensorType> inputs,
                       absl::Span<const ir::TensorType> results, Device device)
    : op_(op),
      view_(ir::GetOpInfo(op).kind == OpKind::kView),
      inplace_(ir::IsInplace(op)),
      device_(device),
      results_(results.begin(), results.end()) {
  SJ_CHECK(!results.empty(), ir::OpName(op), ": a prepared op without results");
  if (view_) return;
  // Null where the device has none: Launch then asks GetKernel, whose error
  // names the op and device (an op whose operands all stay on the CPU of a
  // CUDA step needs none).
  kernel_ = GetDeviceRuntime(device.type).kernels[static_cast<int>(op)];
  for (size_t i = 0; i < inputs.size(); ++i) {
    operand_dtypes_.push_back(OperandDType(
        op, static_cast<int>(i), inputs[i].dtype, inputs, results[0]));
  }
}

void PreparedOp::Launch(absl::Span<const Tensor> inputs, const ir::Attrs& attrs,
                        absl::Span<Tensor> out) const {
  SJ_CHECK(out.size() == results_.size(), ir::OpName(op_), ": ",
           results_.size(), " results prepared, ", out.size(), " asked for");
  if (view_) {
    out[0] = MakeView(op_, inputs[0], attrs, results_[0]);
    return;
  }
  // The device as Dispatch decides it, with the program's device for
  // factories: a CUDA step's CPU scalars move over, copy_ reads any device.
  const Device device = CommonDevice(op_, inputs, device_);
  const absl::InlinedVector<Tensor, 4> converted = KernelOperands(
      op_, inputs, device, [&](size_t i) { return operand_dtypes_[i]; });
  if (inplace_) {
    out[0] = inputs[0];
  } else {
    out[0] = empty(results_[0].shape,
                   {.dtype = results_[0].dtype, .device = device});
  }
  for (size_t i = 1; i < results_.size(); ++i)
    out[i] = empty(results_[i].shape,
                   {.dtype = results_[i].dtype, .device = device});
  const Kernel kernel = device == device_ && kernel_ != nullptr
                            ? kernel_
                            : GetKernel(op_, device);
  kernel(KernelArgs{op_, converted, attrs, out[0], out.subspan(1)});
  if (inplace_) out[0].storage()->BumpVersion();
}

std::vector<Tensor> DispatchResults(OpId op, absl::Span<const Tensor> inputs,
                                    const ir::Attrs& attrs, int num_results) {
  WaitPending(inputs);
  absl::InlinedVector<ir::TensorType, 4> types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    SJ_REQUIRE(inputs[i].defined(), ir::OpName(op), ": input ", i, " is an undefined tensor");
    types.push_back({inputs[i].dtype(), inputs[i].shape()});
  }
  const std::vector<ir::TensorType> out_types =
      ValueOrThrow(ir::InferTypes(op, types, attrs, num_results));
  const Device device = CommonDevice(op, inputs, t_factory_device);
  absl::InlinedVector<Tensor, 4> converted(inputs.begin(), inputs.end());
  for (Tensor& t : converted) {
    if (t.device() != device) t = TransferTensor(t, device);
  }
  std::vector<Tensor> out;
  for (const ir::TensorType& t : out_types) {
    out.push_back(empty(t.shape, {.dtype = t.dtype, .device = device}));
  }
  const KernelArgs k{op, converted, attrs, out[0], absl::MakeConstSpan(out).subspan(1)};
  GetKernel(op, device)(k);
  return out;
}

}  // namespace stepjit::runtime
