// CublasLtGemm: runs planned GEMMs through cuBLASLt, caching the heuristic's
// algorithm per shape, a workspace per stream and capture, and the kernels
// that finish epilogues cuBLASLt lacks.
#include "devices/cuda/cublaslt/cublaslt.h"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "devices/cuda/cublaslt/cublaslt_api.h"
#include "devices/cuda/cublaslt/cublaslt_epilogue.h"
#include "devices/cuda/cublaslt/cublaslt_library.h"
#include "devices/cuda/cublaslt/cublaslt_plan.h"
#include "ir/dtype.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {

namespace {

using ir::DType;
using Api = CublasLtLibrary::Api;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// The largest power of two (up to 256) `p` is aligned to, which the
// heuristic must know to pick a kernel that may load it vectorized.
uint32_t Alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// What a heuristic answer depends on.
using AlgoKey =
    std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t, int64_t, int64_t,
               int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
               int64_t, int32_t, uint32_t, uint32_t, uint32_t, uint32_t>;

AlgoKey KeyOf(const LtPlan& p) {
  return {static_cast<int32_t>(p.data_type),
          static_cast<int32_t>(p.compute_type),
          static_cast<int32_t>(p.op_a),
          static_cast<int32_t>(p.op_b),
          static_cast<int32_t>(p.epilogue),
          p.m,
          p.n,
          p.k,
          p.a.ld,
          p.b.ld,
          p.c.ld,
          p.batch > 1 ? p.batch : 1,
          p.a.batch_stride,
          p.b.batch_stride,
          p.c.batch_stride,
          p.beta != 0,
          Alignment(p.a.ptr),
          Alignment(p.b.ptr),
          Alignment(p.c.ptr),
          p.bias != nullptr ? Alignment(p.bias) : 0};
}

// cuBLASLt descriptors for one call, destroyed with it.
struct Descriptors {
  const Api* lt = nullptr;
  LtMatmulDesc op = nullptr;
  LtLayout a = nullptr, b = nullptr, c = nullptr;

  ~Descriptors() {
    if (op != nullptr) lt->MatmulDescDestroy(op);
    for (LtLayout l : {a, b, c})
      if (l != nullptr) lt->MatrixLayoutDestroy(l);
  }
};

absl::Status MakeLayout(const Api& lt, const LtPlan& p, const LtMatrix& x,
                        LtLayout* out) {
  RETURN_IF_ERROR(
      LtCheck(lt,
              lt.MatrixLayoutCreate(out, static_cast<int32_t>(p.data_type),
                                    static_cast<uint64_t>(x.rows),
                                    static_cast<uint64_t>(x.cols), x.ld),
              absl::StrCat("cublasLtMatrixLayoutCreate(", x.rows, "x", x.cols,
                           ", ld=", x.ld, ")")));
  if (p.batch > 1) {
    const int32_t count = static_cast<int32_t>(p.batch);
    RETURN_IF_ERROR(LtCheck(lt,
                            lt.MatrixLayoutSetAttribute(*out, kLayoutBatchCount,
                                                        &count, sizeof(count)),
                            "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)"));
    const int64_t stride = x.batch_stride;
    RETURN_IF_ERROR(
        LtCheck(lt,
                lt.MatrixLayoutSetAttribute(*out, kLayoutStridedBatchOffset,
                                            &stride, sizeof(stride)),
                "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)"));
  }
  return absl::OkStatus();
}

absl::Status MakeDescriptors(const Api& lt, const LtPlan& p, Descriptors& d) {
  d.lt = &lt;
  RETURN_IF_ERROR(
      LtCheck(lt,
              lt.MatmulDescCreate(&d.op, static_cast<int32_t>(p.compute_type),
                                  static_cast<int32_t>(p.scale_type)),
              "cublasLtMatmulDescCreate"));
  const int32_t op_a = static_cast<int32_t>(p.op_a);
  const int32_t op_b = static_cast<int32_t>(p.op_b);
  const uint32_t epilogue = static_cast<uint32_t>(p.epilogue);
  RETURN_IF_ERROR(LtCheck(
      lt, lt.MatmulDescSetAttribute(d.op, kDescTransA, &op_a, sizeof(op_a)),
      "cublasLtMatmulDescSetAttribute(TRANSA)"));
  RETURN_IF_ERROR(LtCheck(
      lt, lt.MatmulDescSetAttribute(d.op, kDescTransB, &op_b, sizeof(op_b)),
      "cublasLtMatmulDescSetAttribute(TRANSB)"));
  RETURN_IF_ERROR(LtCheck(lt,
                          lt.MatmulDescSetAttribute(
                              d.op, kDescEpilogue, &epilogue, sizeof(epilogue)),
                          "cublasLtMatmulDescSetAttribute(EPILOGUE)"));
  if (p.bias != nullptr) {
    const void* bias = p.bias;
    const int32_t bias_type = static_cast<int32_t>(p.data_type);
    RETURN_IF_ERROR(LtCheck(
        lt,
        lt.MatmulDescSetAttribute(d.op, kDescBiasPointer, &bias, sizeof(bias)),
        "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
    RETURN_IF_ERROR(
        LtCheck(lt,
                lt.MatmulDescSetAttribute(d.op, kDescBiasDataType, &bias_type,
                                          sizeof(bias_type)),
                "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)"));
  }
  RETURN_IF_ERROR(MakeLayout(lt, p, p.a, &d.a));
  RETURN_IF_ERROR(MakeLayout(lt, p, p.b, &d.b));
  return MakeLayout(lt, p, p.c, &d.c);
}

struct Algo {
  bool found = false;
  LtAlgo algo = {};
  size_t workspace_bytes = 0;
};

// A GEMM shape's cuBLASLt call, made once (CublasLtGemm::Impl::Prepare):
// its descriptors, the heuristic's algorithm, and whether the fused
// epilogue had to be given up (`plain`: the product alone, bias and
// activation in our kernels). Calls set the bias pointer (which changes
// from call to call) and run under `mu`, so that one call's pointer cannot
// reach another's matmul.
struct PreparedGemm {
  std::mutex mu;
  std::unique_ptr<Descriptors> d;
  Algo algo;
  bool plain = false;
};

}  // namespace

struct CublasLtGemm::Impl {
  const Api* lt = nullptr;
  Backend* backend = nullptr;
  LtHandle handle = nullptr;

  std::mutex mu;
  // By the fused plan's key (KeyOf): what each GEMM shape needs, made once.
  absl::flat_hash_map<AlgoKey, std::shared_ptr<PreparedGemm>>
      prepared;  // guarded by mu
  // By (stream, capture); see Run.
  absl::flat_hash_map<std::pair<Stream, uint64_t>, void*>
      workspaces;  // guarded by mu
  struct Kernel {
    std::shared_ptr<LoadedModule> module;
    KernelHandle fn;
  };
  absl::flat_hash_map<std::pair<DType, GemmActivation>, Kernel>
      kernels;  // guarded by mu
  // The bias-gradient kernels, by dtype.
  absl::flat_hash_map<DType, Kernel> bias_grad_kernels;  // guarded by mu

  absl::StatusOr<Algo> FindAlgo(const LtPlan& p, const Descriptors& d);
  // The cached call for `plan` (made from `args` on first use).
  absl::StatusOr<std::shared_ptr<PreparedGemm>> Prepare(
      const LtPlan& plan, const DeviceGemmArgs& args);
  absl::StatusOr<void*> Workspace(Stream stream, uint64_t capture);
  // Compiles and loads `src`; mu must be held.
  absl::StatusOr<Kernel> LoadKernel(const EpilogueKernelSource& src);
  absl::StatusOr<KernelHandle> EpilogueKernel(DType dtype,
                                              GemmActivation activation);
  absl::StatusOr<KernelHandle> BiasGradKernel(DType dtype);
  absl::Status LaunchGrid(KernelHandle fn, int64_t threads, void** params,
                          Stream stream);
  // Launches `fn` on one block per `per_block` of `work` items (capped as
  // the grid-stride kernels allow), blocks of the preferred size.
  absl::Status LaunchBlocks(KernelHandle fn, int64_t work, int64_t per_block,
                            void** params, Stream stream);
  absl::Status RunPost(const LtPlan& p, const GemmArgs& g, Stream stream);
  absl::Status RunBiasGrad(const LtPlan& p, DType dtype, Stream stream);
};

// The heuristic's best algorithm for `p` (found = false: none).
absl::StatusOr<Algo> CublasLtGemm::Impl::FindAlgo(const LtPlan& p,
                                                  const Descriptors& d) {
  LtPreference pref = nullptr;
  RETURN_IF_ERROR(LtCheck(*lt, lt->MatmulPreferenceCreate(&pref),
                          "cublasLtMatmulPreferenceCreate"));
  struct PrefGuard {
    const Api* lt;
    LtPreference pref;
    ~PrefGuard() { lt->MatmulPreferenceDestroy(pref); }
  } guard{lt, pref};
  const uint64_t workspace = kWorkspaceBytes;
  RETURN_IF_ERROR(
      LtCheck(*lt,
              lt->MatmulPreferenceSetAttribute(pref, kPrefMaxWorkspaceBytes,
                                               &workspace, sizeof(workspace)),
              "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)"));
  const std::pair<int, const void*> aligned[] = {{kPrefMinAlignmentA, p.a.ptr},
                                                 {kPrefMinAlignmentB, p.b.ptr},
                                                 {kPrefMinAlignmentC, p.c.ptr},
                                                 {kPrefMinAlignmentD, p.c.ptr}};
  for (const auto& [attr, ptr] : aligned) {
    const uint32_t bytes = Alignment(ptr);
    RETURN_IF_ERROR(LtCheck(
        *lt,
        lt->MatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes)),
        "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)"));
  }
  LtHeuristicResult result = {};
  int count = 0;
  const LtStatus s = lt->MatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c,
                                                d.c, pref, 1, &result, &count);
  Algo algo;
  if (s == kLtSuccess && count > 0 && result.state == kLtSuccess) {
    algo.found = true;
    algo.algo = result.algo;
    algo.workspace_bytes = result.workspace_size;
  } else if (s != kLtSuccess && s != kLtNotSupported) {
    return LtCheck(*lt, s, "cublasLtMatmulAlgoGetHeuristic");
  }
  return algo;
}

absl::StatusOr<std::shared_ptr<PreparedGemm>> CublasLtGemm::Impl::Prepare(
    const LtPlan& plan, const DeviceGemmArgs& args) {
  const AlgoKey key = KeyOf(plan);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = prepared.find(key);
    if (it != prepared.end()) return it->second;
  }
  auto p = std::make_shared<PreparedGemm>();
  p->d = std::make_unique<Descriptors>();
  RETURN_IF_ERROR(MakeDescriptors(*lt, plan, *p->d));
  absl::StatusOr<Algo> algo = FindAlgo(plan, *p->d);
  if ((!algo.ok() || !algo->found) && plan.epilogue != LtEpilogue::kDefault) {
    // No kernel with this epilogue for these types (f64, say), or a
    // heuristic that refused it: the plain product, then bias, activation
    // and bias gradient in our kernels.
    ASSIGN_OR_RETURN(LtPlan plain, PlanLtGemm(args, /*fuse_epilogue=*/false));
    p->d = std::make_unique<Descriptors>();
    RETURN_IF_ERROR(MakeDescriptors(*lt, plain, *p->d));
    algo = FindAlgo(plain, *p->d);
    p->plain = true;
  }
  if (!algo.ok()) return algo.status();
  if (!algo->found) {
    return absl::UnimplementedError(absl::StrCat(
        "cuBLASLt has no algorithm for a ", ir::DTypeName(args.gemm.dtype),
        " GEMM m=", args.gemm.m, " n=", args.gemm.n, " k=", args.gemm.k,
        " batch=", args.gemm.batch, " on this device"));
  }
  p->algo = *algo;
  std::lock_guard<std::mutex> lock(mu);
  // Another thread may have prepared the same shape meanwhile: keep one.
  return prepared.try_emplace(key, std::move(p)).first->second;
}

absl::StatusOr<void*> CublasLtGemm::Impl::Workspace(Stream stream,
                                                    uint64_t capture) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = workspaces.find({stream, capture});
  if (it != workspaces.end()) return it->second;
  // One per stream: GEMMs on different streams may run at once.
  ASSIGN_OR_RETURN(void* w, backend->DeviceAlloc(kWorkspaceBytes));
  workspaces.emplace(std::make_pair(stream, capture), w);
  return w;
}

absl::StatusOr<CublasLtGemm::Impl::Kernel> CublasLtGemm::Impl::LoadKernel(
    const EpilogueKernelSource& src) {
  ASSIGN_OR_RETURN(std::shared_ptr<LoadedModule> module,
                   backend->LoadSource(src.source, src.name, {src.name}));
  ASSIGN_OR_RETURN(KernelHandle fn, module->Function(src.name));
  return Kernel{std::move(module), fn};
}

absl::StatusOr<KernelHandle> CublasLtGemm::Impl::EpilogueKernel(
    DType dtype, GemmActivation activation) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = kernels.find({dtype, activation});
  if (it != kernels.end()) return it->second.fn;
  ASSIGN_OR_RETURN(Kernel k, LoadKernel(GemmEpilogueKernel(dtype, activation)));
  kernels.emplace(std::make_pair(dtype, activation), k);
  return k.fn;
}

absl::StatusOr<KernelHandle> CublasLtGemm::Impl::BiasGradKernel(DType dtype) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = bias_grad_kernels.find(dtype);
  if (it != bias_grad_kernels.end()) return it->second.fn;
  ASSIGN_OR_RETURN(Kernel k, LoadKernel(GemmBiasGradKernel(dtype)));
  bias_grad_kernels.emplace(dtype, k);
  return k.fn;
}

absl::Status CublasLtGemm::Impl::LaunchBlocks(KernelHandle fn, int64_t work,
                                              int64_t per_block, void** params,
                                              Stream stream) {
  const BackendLimits limits = backend->Limits();
  const int block = std::min(limits.preferred_block, limits.max_block);
  if (per_block == 0) per_block = block;
  const int64_t grid =
      std::min<int64_t>((work + per_block - 1) / per_block,
                        std::min<int64_t>(limits.max_grid, int64_t{1} << 16));
  return backend->Launch(fn, grid, block, params, stream);
}

// Enough blocks of the preferred size for `threads` grid-stride indices.
absl::Status CublasLtGemm::Impl::LaunchGrid(KernelHandle fn, int64_t threads,
                                            void** params, Stream stream) {
  return LaunchBlocks(fn, threads, /*per_block=*/0, params, stream);
}

absl::Status CublasLtGemm::Impl::RunPost(const LtPlan& p, const GemmArgs& g,
                                         Stream stream) {
  if (p.post_bias == nullptr && !p.post_activation.has_value() &&
      !(p.skip_product && !g.accumulate)) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(KernelHandle fn, EpilogueKernel(g.dtype, p.post_activation));
  void* c = g.c;
  const void* bias = p.post_bias;
  long long rows = g.m, cols = g.n, ldc = g.ldc;
  long long stride_c = g.batch > 1 ? g.stride_c : 0, batch = g.batch;
  int keep_c = p.skip_product ? (g.accumulate ? 1 : 0) : 1;
  void* params[] = {&c, &bias, &rows, &cols, &ldc, &stride_c, &batch, &keep_c};
  return LaunchGrid(fn, static_cast<int64_t>(rows) * cols * batch, params,
                    stream);
}

absl::Status CublasLtGemm::Impl::RunBiasGrad(const LtPlan& p, DType dtype,
                                             Stream stream) {
  if (p.post_bias_grad == nullptr || p.n == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(KernelHandle fn, BiasGradKernel(dtype));
  // cuBLASLt's B is the caller's A: the kernel sums the caller's rows.
  const void* a = p.b.ptr;
  void* out = p.post_bias_grad;
  long long rows = p.n, k = p.k, lda = p.b.ld;
  int trans_a = p.op_b == LtOp::kT ? 1 : 0;
  void* params[] = {&a, &out, &rows, &k, &lda, &trans_a};
  // 32 rows per block (GemmBiasGradKernel), all of its warps on them.
  return LaunchBlocks(fn, rows, /*per_block=*/32, params, stream);
}

CublasLtGemm::CublasLtGemm(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

CublasLtGemm::~CublasLtGemm() {
  for (const auto& [key, w] : impl_->workspaces)
    impl_->backend->DeviceFree(w).IgnoreError();
  impl_->lt->Destroy(impl_->handle);
}

absl::Status CublasLtGemm::ReleaseStream(Stream stream) {
  void* w = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->workspaces.find({stream, uint64_t{0}});
    if (it == impl_->workspaces.end()) return absl::OkStatus();
    w = it->second;
    impl_->workspaces.erase(it);
  }
  return impl_->backend->DeviceFree(w);
}

absl::Status CublasLtGemm::ReleaseCapture(uint64_t capture) {
  if (capture == 0) return absl::OkStatus();
  std::vector<void*> freed;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto it = impl_->workspaces.begin(); it != impl_->workspaces.end();) {
      if (it->first.second == capture) {
        freed.push_back(it->second);
        impl_->workspaces.erase(it++);
      } else {
        ++it;
      }
    }
  }
  absl::Status status;
  for (void* w : freed) status.Update(impl_->backend->DeviceFree(w));
  return status;
}

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(
    Backend* backend) {
  ASSIGN_OR_RETURN(const CublasLtLibrary* library, LoadCublasLt());
  auto impl = std::make_unique<Impl>();
  impl->lt = library->api;
  impl->backend = backend;
  RETURN_IF_ERROR(
      LtCheck(*impl->lt, impl->lt->Create(&impl->handle), "cublasLtCreate"));
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(std::move(impl)));
}

absl::Status CublasLtGemm::Run(const DeviceGemmArgs& args, Stream stream,
                               uint64_t capture) {
  Impl& s = *impl_;
  ASSIGN_OR_RETURN(LtPlan plan, PlanLtGemm(args));
  if (plan.no_work) return s.RunBiasGrad(plan, args.gemm.dtype, stream);
  if (!plan.skip_product) {
    ASSIGN_OR_RETURN(std::shared_ptr<PreparedGemm> prepared,
                     s.Prepare(plan, args));
    if (prepared->plain) {
      ASSIGN_OR_RETURN(plan, PlanLtGemm(args, /*fuse_epilogue=*/false));
    }
    const Algo& algo = prepared->algo;
    void* workspace = nullptr;
    if (algo.workspace_bytes > 0) {
      ASSIGN_OR_RETURN(workspace, s.Workspace(stream, capture));
    }
    const float alpha32 = static_cast<float>(plan.alpha);
    const float beta32 = static_cast<float>(plan.beta);
    const bool f64 = plan.scale_type == LtDataType::kF64;
    const void* alpha = f64 ? static_cast<const void*>(&plan.alpha) : &alpha32;
    const void* beta = f64 ? static_cast<const void*>(&plan.beta) : &beta32;
    std::lock_guard<std::mutex> lock(prepared->mu);
    const Descriptors& d = *prepared->d;
    if (plan.bias != nullptr) {
      // The one attribute that changes from call to call.
      const void* bias = plan.bias;
      RETURN_IF_ERROR(LtCheck(*s.lt,
                              s.lt->MatmulDescSetAttribute(
                                  d.op, kDescBiasPointer, &bias, sizeof(bias)),
                              "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
    }
    RETURN_IF_ERROR(LtCheck(
        *s.lt,
        s.lt->Matmul(s.handle, d.op, alpha, plan.a.ptr, d.a, plan.b.ptr, d.b,
                     beta, plan.c.ptr, d.c, const_cast<void*>(plan.c.ptr), d.c,
                     &algo.algo, workspace, algo.workspace_bytes,
                     reinterpret_cast<void*>(stream)),
        absl::StrCat("cublasLtMatmul(m=", plan.m, " n=", plan.n, " k=", plan.k,
                     " batch=", plan.batch, ")")));
  }
  RETURN_IF_ERROR(s.RunPost(plan, args.gemm, stream));
  return s.RunBiasGrad(plan, args.gemm.dtype, stream);
}

}  // namespace stepjit::runtime::cuda
