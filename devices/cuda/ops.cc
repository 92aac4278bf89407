// Eager CUDA ops: each op's device path, from the op table (generated
// single-op kernels), the fixed copy/fill kernels, GEMM and the hand-written
// kernel modules' registrations, and the host round trip for what none of
// them covers.
#include "devices/cuda/ops.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "codegen/cuda/cuda_layout.h"
#include "codegen/cuda/single_op.h"
#include "codegen/region_expand.h"
#include "devices/cpu/kernels.h"
#include "devices/cuda/kernels/collective_ops.h"
#include "devices/cuda/kernels/conv_ops.h"
#include "devices/cuda/kernels/index_ops.h"
#include "devices/cuda/kernels/random_ops.h"
#include "devices/cuda/kernels/row_ops.h"
#include "devices/matmul_plan.h"
#include "ir/infer.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {
namespace {

using ir::AttrKey;
using ir::DType;
using ir::OpId;
using ir::OpKind;

// What the caches below belong to: a new backend starts them afresh.
struct Caches {
  uint64_t generation = 0;  // BackendGeneration() the entries belong to
  absl::flat_hash_map<std::string, std::shared_ptr<LoadedModule>> fixed;
  absl::flat_hash_map<std::string, std::shared_ptr<const LoadedRegion>> regions;
  // (op, operand types, attrs) -> the emitted kernel, or why not.
  absl::flat_hash_map<std::string, std::shared_ptr<const LoadedRegion>> ops;
  absl::flat_hash_map<std::string, std::string> unsupported;
  EagerStats stats;
  std::map<std::string, int64_t> fallbacks;
};

std::mutex g_mu;
Caches& GetCaches(Backend* b) {
  static Caches* c = new Caches;
  const uint64_t generation = BackendGeneration();
  if (c->generation != generation) {
    *c = Caches();
    c->generation = generation;
  }
  return *c;
}

void Check(const absl::Status& s, absl::string_view what) {
  SJ_REQUIRE(s.ok(), what, ": ", s.message());
}

std::string AttrText(const ir::AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return absl::StrCat("[", absl::StrJoin(x, ","), "]");
        } else if constexpr (std::is_same_v<T, DType>) {
          return std::string(ir::DTypeName(x));
        } else if constexpr (std::is_same_v<T, double>) {
          return absl::StrFormat("%a", x);
        } else {
          return absl::StrCat(x);
        }
      },
      v);
}

std::string OpKey(OpId op, absl::Span<const ir::TensorType> types,
                  const ir::Attrs& attrs) {
  std::string key(ir::OpName(op));
  for (const ir::TensorType& t : types) {
    absl::StrAppend(&key, " ", ir::DTypeName(t.dtype), ir::ShapeToString(t.shape));
  }
  for (const auto& [k, v] : attrs.items()) {
    absl::StrAppend(&key, " ", static_cast<int>(k), "=", AttrText(v));
  }
  return key;
}

// Row ops' rows up to this length run one per thread in the single-op
// kernels, summed in element order as the CPU kernels sum them, so eager
// CUDA results equal eager CPU ones bit for bit (with the same libm);
// longer rows take a warp or a block each (a reordered sum).
constexpr int64_t kEagerMaxThreadRow = 256;

// The single-op kernel for these operand types, or null when the emitter
// does not lower the op (the caller then runs it on the host).
std::shared_ptr<const LoadedRegion> SingleOpKernel(Backend& b, OpId op,
                                                   absl::Span<const ir::TensorType> types,
                                                   const ir::Attrs& attrs) {
  const std::string key = OpKey(op, types, attrs);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    Caches& c = GetCaches(&b);
    if (auto it = c.ops.find(key); it != c.ops.end()) return it->second;
    if (c.unsupported.contains(key)) return nullptr;
  }
  absl::StatusOr<codegen::cuda::RegionSource> src =
      codegen::cuda::EmitSingleOp(op, types, attrs,
                                  {.block = b.Limits().preferred_block,
                                   .max_thread_row = kEagerMaxThreadRow});
  if (!src.ok()) {
    std::lock_guard<std::mutex> lock(g_mu);
    GetCaches(&b).unsupported[key] = std::string(src.status().message());
    return nullptr;
  }
  absl::StatusOr<std::shared_ptr<const LoadedRegion>> region = LoadRegion(*src);
  Check(region.status(), absl::StrCat("compiling the CUDA kernel for ", key));
  std::lock_guard<std::mutex> lock(g_mu);
  GetCaches(&b).ops[key] = *region;
  return *region;
}

// An op through its generated kernel; false when there is none.
bool RunGenerated(Backend& b, const KernelArgs& k) {
  std::vector<Tensor> inputs(k.inputs.begin(), k.inputs.end());
  std::vector<ir::TensorType> types;
  for (const Tensor& t : inputs) types.push_back({t.dtype(), t.shape()});
  std::shared_ptr<const LoadedRegion> region = SingleOpKernel(b, k.op, types, k.attrs);
  if (region == nullptr) return false;
  const bool inplace = ir::IsInplace(k.op);
  // The kernels read and write contiguous buffers.
  for (Tensor& t : inputs) t = ContiguousOnDevice(t);
  Tensor out = inplace ? inputs[0] : k.out;
  std::vector<void*> ptrs;
  for (const Tensor& t : inputs) ptrs.push_back(t.data_ptr());
  ptrs.push_back(out.data_ptr());
  Check(LaunchRegion(*region, ptrs, CurrentStream()),
        absl::StrCat("launching ", region->source.name));
  if (inplace && !inputs[0].is_same(k.inputs[0])) CopySameDType(k.out, inputs[0]);
  std::lock_guard<std::mutex> lock(g_mu);
  ++GetCaches(&b).stats.generated_launches;
  return true;
}

// Row ops through their generated kernels: floating-point rows, with the
// operand forms the row expansion takes (codegen/region_expand.h).
bool GeneratedRowOp(const KernelArgs& k) {
  if (!ir::IsFloating(k.out.dtype()) || k.inputs[0].dtype() != k.out.dtype())
    return false;
  switch (k.op) {
    case OpId::kCrossEntropy:
      return k.inputs[0].dim() == 2 && k.inputs[1].dtype() == DType::kI64;
    case OpId::kMseLoss:
      return k.inputs[0].shape() == k.inputs[1].shape() &&
             k.inputs[0].dtype() == k.inputs[1].dtype();
    default:
      return true;
  }
}

// A row op over one `dim` (softmax, log_softmax) that is not the last runs
// over a permuted contiguous copy whose rows are that dim (as the CPU
// kernel does), through the generated kernel for the last dim.
bool RunGeneratedOverDim(Backend& b, const KernelArgs& k) {
  const Tensor& x = k.inputs[0];
  const int64_t d = ir::WrapDim(k.attrs.GetInt(AttrKey::kDim), x.dim());
  if (x.dim() == 0 || d == x.dim() - 1) return RunGenerated(b, k);
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i != d) perm.push_back(i);
  }
  perm.push_back(d);
  const Tensor rows = ContiguousOnDevice(cpu::PermutedView(x, perm));
  const Tensor out_rows = cpu::PermutedView(k.out, perm);
  Tensor dst =
      empty(rows.shape(), {.dtype = rows.dtype(), .device = rows.device()});
  const ir::Attrs attrs = {{AttrKey::kDim, int64_t{-1}}};
  const Tensor in[] = {rows};
  if (!RunGenerated(b, KernelArgs{k.op, in, attrs, dst})) return false;
  CopyInto(out_rows, dst);
  return true;
}

bool RunGeneratedRowOp(Backend& b, const KernelArgs& k) {
  if (!GeneratedRowOp(k)) return false;
  if (k.attrs.Has(AttrKey::kDim)) return RunGeneratedOverDim(b, k);
  return RunGenerated(b, k);
}

bool RunCopy(Backend&, const KernelArgs& k) {
  CopyInto(k.out, k.inputs.back());
  return true;
}

bool RunFill(Backend&, const KernelArgs& k) {
  Fill(k.out, k.attrs.GetDouble(AttrKey::kValue));
  return true;
}

// One strided-batched GEMM per matmul: batch dims that do not collapse to
// one stride (attention's q, k and v, permuted views of the fused QKV
// product) are copied contiguous first (devices/matmul_plan.h).
bool RunMatmul(Backend& b, const KernelArgs& k) {
  MatmulPlan plan = PlanMatmul(k, &CopySameDType, /*one_call=*/true);
  if (plan.empty) return true;
  SJ_CHECK(plan.outer == 1, "a CUDA matmul planned as ", plan.outer, " calls");
  Check(b.Gemm({.gemm = plan.Call(0), .allow_tf32 = AllowTf32()},
               CurrentStream()),
        "CUDA matmul");
  std::lock_guard<std::mutex> lock(g_mu);
  ++GetCaches(&b).stats.gemms;
  return true;
}

// The paths the op table gives: every op a fusion region may compute runs
// as a generated single-op kernel, with copies, fills and GEMMs as above;
// then the kernel modules set theirs (a module's path replaces a generated
// one: var's, whose CPU kernel sums in an order generated code does not
// reproduce).
DevicePaths MakeDevicePaths() {
  DevicePaths paths{};
  for (int i = 0; i < ir::kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpKind kind = ir::GetOpInfo(op).kind;
    if (kind == OpKind::kElementwise || kind == OpKind::kInplaceUpdate ||
        ir::IsFusedReduction(op)) {
      paths[i] = &RunGenerated;
    } else if (ir::IsRowReduction(op)) {
      paths[i] = &RunGeneratedRowOp;
    } else if (kind == OpKind::kMatmul) {
      paths[i] = &RunMatmul;
    }
  }
  paths[static_cast<int>(OpId::kContiguous)] = &RunCopy;
  paths[static_cast<int>(OpId::kCopyInplace)] = &RunCopy;
  paths[static_cast<int>(OpId::kFull)] = &RunFill;
  paths[static_cast<int>(OpId::kFillInplace)] = &RunFill;
  AddRowPaths(paths);
  AddRandomPaths(paths);
  AddIndexPaths(paths);
  AddConvPaths(paths);
  AddCollectivePaths(paths);
  return paths;
}

// Operands to the host, the CPU kernel, the result back.
void RunOnHost(Backend& b, const KernelArgs& k) {
  // Captured work does not run, so a host round trip would read garbage
  // (and synchronizing is illegal while capturing): refuse, and the
  // capture is abandoned with this reason.
  SJ_REQUIRE(!CaptureUnderway(), ir::OpName(k.op), " with these operand dtypes needs a host ",
             "round trip, which a CUDA graph cannot capture");
  std::vector<Tensor> host;
  for (const Tensor& t : k.inputs) host.push_back(ToDevice(t, Device::cpu()));
  Tensor out = ir::IsInplace(k.op) ? host[0]
                                   : empty(k.out.shape(), {.dtype = k.out.dtype()});
  CpuKernel kernel = GetCpuKernel(k.op);
  SJ_CHECK(kernel != nullptr, "no cpu kernel for ", ir::OpName(k.op));
  kernel(KernelArgs{k.op, host, k.attrs, out});
  CopySameDType(k.out, ToDevice(out, k.out.device()));
  std::lock_guard<std::mutex> lock(g_mu);
  Caches& c = GetCaches(&b);
  ++c.stats.host_fallbacks;
  ++c.fallbacks[std::string(ir::OpName(k.op))];
}

}  // namespace

void LaunchFixed(Backend& b, const FixedModule& module, absl::string_view kernel,
                 int64_t threads, void** args) {
  std::shared_ptr<LoadedModule> loaded;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    Caches& c = GetCaches(&b);
    std::shared_ptr<LoadedModule>& slot = c.fixed[module.name];
    if (slot == nullptr) {
      absl::StatusOr<std::shared_ptr<LoadedModule>> m =
          b.LoadSource(module.source, module.name, module.kernels);
      Check(m.status(), absl::StrCat("compiling the CUDA kernels ", module.name));
      slot = *m;
      ++c.stats.modules_loaded;
    }
    ++c.stats.copy_launches;
    loaded = slot;
  }
  absl::StatusOr<KernelHandle> k = loaded->Function(kernel);
  Check(k.status(), kernel);
  const int block = b.Limits().preferred_block;
  const int64_t grid =
      std::max<int64_t>(1, std::min<int64_t>((threads + block - 1) / block, b.Limits().max_grid));
  Check(b.Launch(*k, grid, block, args, CurrentStream()), absl::StrCat("launching ", kernel));
}

absl::StatusOr<std::shared_ptr<const LoadedRegion>> LoadRegion(
    const codegen::cuda::RegionSource& source) {
  ASSIGN_OR_RETURN(Backend * b, RequireBackend());
  {
    std::lock_guard<std::mutex> lock(g_mu);
    Caches& c = GetCaches(b);
    if (auto it = c.regions.find(source.source); it != c.regions.end()) {
      // A shape-generic region at other sizes: the same module and kernels,
      // launched with this body's grid, buffers and sizes.
      if (source.shape_generic && it->second->source.dims != source.dims) {
        auto sized = std::make_shared<LoadedRegion>(*it->second);
        sized->source = source;
        return std::shared_ptr<const LoadedRegion>(std::move(sized));
      }
      return it->second;
    }
  }
  auto region = std::make_shared<LoadedRegion>();
  region->source = source;
  std::vector<std::string> names;
  for (const codegen::cuda::KernelLaunch& k : source.kernels) names.push_back(k.name);
  ASSIGN_OR_RETURN(region->module, b->LoadSource(source.source, source.name, names));
  for (const std::string& n : names) {
    ASSIGN_OR_RETURN(KernelHandle h, region->module->Function(n));
    region->kernels.push_back(h);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  Caches& c = GetCaches(b);
  ++c.stats.modules_loaded;
  c.regions[source.source] = region;
  return std::shared_ptr<const LoadedRegion>(region);
}

namespace {

// A region's scratch slots and per-reduction partials after its pointers:
// temporaries on the current stream, so their blocks are reused only after
// the launches queued next in stream order.
void AppendTemporaries(const codegen::cuda::RegionSource& src, std::vector<Tensor>& temps,
                       std::vector<void*>& values) {
  if (src.num_slots > 0) {
    temps.push_back(empty({src.num_slots}, {.dtype = DType::kF64, .device = Device::cuda()}));
    values.push_back(temps.back().data_ptr());
  } else {
    values.push_back(nullptr);
  }
  for (int a = 0; a < src.num_accumulators; ++a) {
    temps.push_back(empty({std::max<int64_t>(src.partials, 1)},
                          {.dtype = DType::kF64, .device = Device::cuda()}));
    values.push_back(temps.back().data_ptr());
  }
}

absl::Status LaunchAll(Backend& b, const LoadedRegion& region, std::vector<void*>& values,
                       Stream stream) {
  std::vector<void*> args(values.size());
  for (size_t i = 0; i < values.size(); ++i) args[i] = &values[i];
  // A shape-generic region's sizes, passed by value (sj_dims_t).
  std::array<int64_t, codegen::cuda::kMaxDims> dims{};
  if (region.source.shape_generic) {
    std::copy(region.source.dims.begin(), region.source.dims.end(),
              dims.begin());
    args.push_back(dims.data());
  }
  for (size_t i = 0; i < region.source.kernels.size(); ++i) {
    const codegen::cuda::KernelLaunch& k = region.source.kernels[i];
    RETURN_IF_ERROR(b.Launch(region.kernels[i], k.grid, k.block, args.data(), stream));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchRegion(const LoadedRegion& region, absl::Span<void* const> ptrs,
                          Stream stream) {
  ASSIGN_OR_RETURN(Backend * b, RequireBackend());
  StreamGuard guard(stream);
  std::vector<Tensor> temps;
  std::vector<void*> values(ptrs.begin(), ptrs.end());
  AppendTemporaries(region.source, temps, values);
  return LaunchAll(*b, region, values, stream);
}

absl::Status LaunchMultiRegion(const LoadedRegion& combined,
                               absl::Span<const codegen::cuda::RegionSource> members,
                               absl::Span<const std::vector<void*>> ptrs, Stream stream) {
  ASSIGN_OR_RETURN(Backend * b, RequireBackend());
  if (members.size() != ptrs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "multi-region launch of ", combined.source.name, ": ", members.size(),
        " regions but pointers for ", ptrs.size()));
  }
  StreamGuard guard(stream);
  std::vector<Tensor> temps;
  std::vector<void*> values;
  for (size_t m = 0; m < members.size(); ++m) {
    values.insert(values.end(), ptrs[m].begin(), ptrs[m].end());
    AppendTemporaries(members[m], temps, values);
  }
  if (values.size() != combined.source.params.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "multi-region launch of ", combined.source.name, ": ", values.size(),
        " arguments, expected ", combined.source.params.size()));
  }
  return LaunchAll(*b, combined, values, stream);
}

void CopyInto(const Tensor& dst, const Tensor& src) {
  if (src.dtype() == dst.dtype()) {
    CopySameDType(dst, src);
    return;
  }
  Backend& b = BackendOrThrow();
  Tensor s = ContiguousOnDevice(src);
  Tensor cast = empty(s.shape(), {.dtype = dst.dtype(), .device = s.device()});
  const ir::Attrs attrs = {{AttrKey::kDTypeAttr, dst.dtype()}};
  const Tensor in[] = {s};
  SJ_REQUIRE(RunGenerated(b, KernelArgs{OpId::kCast, in, attrs, cast}),
             "cast from ", ir::DTypeName(src.dtype()), " to ",
             ir::DTypeName(dst.dtype()), " has no CUDA kernel");
  CopySameDType(dst, cast);
}

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace
void SetAllowTf32(bool allow) { g_allow_tf32.store(allow); }
bool AllowTf32() { return g_allow_tf32.load(); }

const DevicePaths& GetDevicePaths() {
  static const DevicePaths paths = MakeDevicePaths();
  return paths;
}

bool RunsOnDevice(OpId op) {
  return ir::IsView(op) || GetDevicePaths()[static_cast<int>(op)] != nullptr;
}

void RunKernel(const KernelArgs& k) {
  Backend& b = BackendOrThrow();
  const DevicePath path = GetDevicePaths()[static_cast<int>(k.op)];
  if (path != nullptr && path(b, k)) return;
  RunOnHost(b, k);
}

EagerStats GetEagerStats() {
  std::lock_guard<std::mutex> lock(g_mu);
  Backend* b = GetBackend();
  return b == nullptr ? EagerStats() : GetCaches(b).stats;
}

std::string HostFallbackSummary() {
  std::lock_guard<std::mutex> lock(g_mu);
  Backend* b = GetBackend();
  if (b == nullptr) return "";
  std::vector<std::string> parts;
  for (const auto& [op, n] : GetCaches(b).fallbacks) parts.push_back(absl::StrCat(op, " x", n));
  return absl::StrJoin(parts, ", ");
}

}  // namespace stepjit::runtime::cuda
