// CPU GEMM: argument checks, OpenBLAS and oneDNN paths, f16/bf16 through f32.
#include "devices/cpu/gemm.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "devices/cpu/dnnl_context.h"
#include "devices/cpu/gemm_bias_grad.h"
#include "devices/cpu/loops.h"
#include "dnnl.hpp"
#include "ir/gemm_activation.h"
#include "ir/host_math.h"
#include "ir/scalar_def.h"
#include "ir/status.h"

namespace stepjit::runtime::cpu {
namespace {

using ir::DType;

// Rows and columns of an operand as stored, i.e. before op() transposes it.
struct Extent {
  int64_t rows, cols;
};
Extent StoredA(const GemmArgs& g) {
  return g.trans_a ? Extent{g.k, g.m} : Extent{g.m, g.k};
}
Extent StoredB(const GemmArgs& g) {
  return g.trans_b ? Extent{g.n, g.k} : Extent{g.k, g.n};
}

// ---- Epilogue in one pass over C (OpenBLAS, and k == 0). ----

// Computes in float (double for f64), rounds once, as the eager add and
// activation kernels do on their own.
template <typename T, typename Act>
void EpilogueRows(const GemmArgs& g, Act act) {
  using V = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const T* bias = static_cast<const T*>(g.bias);
  for (int64_t i = 0; i < g.batch; ++i) {
    for (int64_t r = 0; r < g.m; ++r) {
      T* c = static_cast<T*>(g.c) + i * g.stride_c + r * g.ldc;
      for (int64_t j = 0; j < g.n; ++j) {
        V x = V(c[j]);
        if (bias != nullptr) x += V(bias[j]);
        c[j] = T(act(x));
      }
    }
  }
}

template <typename T>
void ApplyEpilogue(const GemmArgs& g) {
  using V = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using ir::OpId;
  using ir::ScalarDef;
  ir::HostMath<V> m;
  if (!g.activation.has_value()) {
    if (g.bias != nullptr) EpilogueRows<T>(g, [](V x) { return x; });
    return;
  }
  const bool known = ir::VisitGemmActivation(*g.activation, [&]<OpId op>() {
    EpilogueRows<T>(g, [&](V x) { return ScalarDef<op>::Apply(m, x); });
  });
  SJ_CHECK(known, "Gemm: ", ir::OpName(*g.activation),
           " is not a GEMM activation");
}

// ValidateGemmArgs rejected the other dtypes.
void ApplyEpilogueAnyDType(const GemmArgs& g) {
  SJ_DISPATCH_FLOAT(g.dtype, "Gemm", ApplyEpilogue<T>(g));
}

// ---- OpenBLAS (f32, f64). No batched cblas in 0.3.21, so loop. ----

template <typename T>
absl::Status OpenBlasGemm(const GemmArgs& g) {
  const CBLAS_TRANSPOSE ta = g.trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = g.trans_b ? CblasTrans : CblasNoTrans;
  const T beta = g.accumulate ? 1 : 0;
  for (int64_t i = 0; i < g.batch; ++i) {
    const T* a = static_cast<const T*>(g.a) + i * g.stride_a;
    const T* b = static_cast<const T*>(g.b) + i * g.stride_b;
    T* c = static_cast<T*>(g.c) + i * g.stride_c;
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, ta, tb, g.m, g.n, g.k, 1.0f, a, g.lda, b,
                  g.ldb, beta, c, g.ldc);
    } else {
      cblas_dgemm(CblasRowMajor, ta, tb, g.m, g.n, g.k, 1.0, a, g.lda, b, g.ldb,
                  beta, c, g.ldc);
    }
  }
  ApplyEpilogue<T>(g);
  return absl::OkStatus();
}

// ---- oneDNN matmul (f32; f16/bf16 where the CPU has kernels). ----

// Everything a primitive is specialized on. Strides are zeroed when batch is
// 1 so that unbatched calls share entries. oneDNN fixes a primitive's thread
// count when it is created (omp_get_max_threads(), narrowed by a TeamScope):
// each team size gets its own.
auto KeyOf(const GemmArgs& g) {
  const bool batched = g.batch > 1;
  return std::make_tuple(omp_get_max_threads(), g.dtype, g.trans_a, g.trans_b,
                         g.accumulate, g.bias != nullptr, g.activation, g.m,
                         g.n, g.k, g.lda, g.ldb, g.ldc, g.batch,
                         batched ? g.stride_a : 0, batched ? g.stride_b : 0,
                         batched ? g.stride_c : 0);
}
using PrimitiveKey = decltype(KeyOf(GemmArgs{}));

// `implemented` is false when oneDNN has no kernel for this dtype on this
// CPU; that answer is cached too, so the fallback costs no retry per call.
struct CacheEntry {
  bool implemented = false;
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, c_md, bias_md;  // bias_md: zero when none
  dnnl::memory::desc scratch_md;  // the call's scratchpad (ours, per thread)
};

struct PrimitiveCache {
  // std::mutex: ThreadSanitizer sees it (Debian's abseil, absl::Mutex
  // included, is not built for TSan).
  std::mutex mu;  // guards map
  // Grows with the distinct shapes seen; a training step has a handful.
  absl::flat_hash_map<PrimitiveKey, CacheEntry> map;
};
PrimitiveCache& Cache() {
  static PrimitiveCache* cache = new PrimitiveCache();
  return *cache;
}

dnnl::memory::data_type DnnlType(DType t) {
  using dt = dnnl::memory::data_type;
  return t == DType::kF16 ? dt::f16 : t == DType::kBF16 ? dt::bf16 : dt::f32;
}

// Describes op(X) as a rows x cols (x batch) view of X's storage. A broadcast
// operand (stride 0) gets batch dimension 1: oneDNN broadcasts that with its
// jit kernels, while a literal zero stride drops it to the reference kernel.
dnnl::memory::desc OperandDesc(DType t, int64_t batch, int64_t stride,
                               int64_t rows, int64_t cols, int64_t ld,
                               bool trans) {
  dnnl::memory::dims dims = {rows, cols};
  dnnl::memory::dims strides =
      trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  if (batch > 1) {
    dims.insert(dims.begin(), stride == 0 ? 1 : batch);
    strides.insert(strides.begin(), stride == 0 ? rows * cols : stride);
  }
  return dnnl::memory::desc(dims, DnnlType(t), strides);
}

// The bias row, broadcast over the rows (and the batch) of C.
dnnl::memory::desc BiasDesc(const GemmArgs& g) {
  dnnl::memory::dims dims = {1, g.n};
  if (g.batch > 1) dims.insert(dims.begin(), 1);
  using tag = dnnl::memory::format_tag;
  return dnnl::memory::desc(dims, DnnlType(g.dtype),
                            g.batch > 1 ? tag::abc : tag::ab);
}

// oneDNN's post-op for an activation it computes as the scalar definition
// does; undef for none and for activations it has no exact match for (those
// run after the product, with the bias, in ApplyEpilogue).
dnnl::algorithm DnnlActivation(GemmActivation a) {
  if (!a.has_value()) return dnnl::algorithm::undef;
  switch (*a) {
    case ir::OpId::kRelu:
      return dnnl::algorithm::eltwise_relu;
    case ir::OpId::kGelu:
      return dnnl::algorithm::eltwise_gelu_erf;
    case ir::OpId::kGeluTanh:
      return dnnl::algorithm::eltwise_gelu_tanh;
    default:
      return dnnl::algorithm::undef;
  }
}

absl::StatusOr<CacheEntry> GetPrimitive(const GemmArgs& g) {
  const PrimitiveKey key = KeyOf(g);
  PrimitiveCache& cache = Cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  if (auto it = cache.map.find(key); it != cache.map.end()) return it->second;
  CacheEntry e;
  e.a_md =
      OperandDesc(g.dtype, g.batch, g.stride_a, g.m, g.k, g.lda, g.trans_a);
  e.b_md =
      OperandDesc(g.dtype, g.batch, g.stride_b, g.k, g.n, g.ldb, g.trans_b);
  e.c_md = OperandDesc(g.dtype, g.batch, g.stride_c, g.m, g.n, g.ldc, false);
  if (g.bias != nullptr) e.bias_md = BiasDesc(g);
  try {
    // Bias first (inside the product), then C = act(A*B + bias + 1.0 * C).
    dnnl::post_ops ops;
    if (g.accumulate) ops.append_sum(1.0f);
    if (DnnlActivation(g.activation) != dnnl::algorithm::undef) {
      ops.append_eltwise(1.0f, DnnlActivation(g.activation), 0.0f, 0.0f);
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    // The library's own scratchpad belongs to the primitive, so two threads
    // running one primitive at once (batched matmul splits its calls across
    // threads) would share it; each call brings a per-thread buffer instead.
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::desc desc =
        g.bias != nullptr
            ? dnnl::matmul::desc(e.a_md, e.b_md, e.bias_md, e.c_md)
            : dnnl::matmul::desc(e.a_md, e.b_md, e.c_md);
    dnnl::matmul::primitive_desc pd(desc, attr, Dnnl().engine);
    e.prim = dnnl::matmul(pd);
    e.scratch_md = pd.scratchpad_desc();
    e.implemented = true;
  } catch (const dnnl::error& err) {
    if (err.status != dnnl_unimplemented) {
      return absl::InternalError(absl::StrCat(
          "Gemm: oneDNN matmul creation failed for ", ir::DTypeName(g.dtype),
          " m=", g.m, " n=", g.n, " k=", g.k, ": ", err.what()));
    }
  }
  cache.map.emplace(key, e);
  return e;
}

// UnimplementedError when oneDNN has no kernel for the dtype on this CPU.
absl::Status OneDnnGemm(const GemmArgs& g) {
  if (g.batch > 1 && g.stride_a == 0 && g.stride_b == 0) {
    // oneDNN rejects a batched C when both sources broadcast; every product
    // is the same single matmul, so run it per C.
    GemmArgs one = g;
    one.batch = 1;
    for (int64_t i = 0; i < g.batch; ++i) {
      one.c = static_cast<char*>(g.c) + i * g.stride_c * ir::DTypeSize(g.dtype);
      RETURN_IF_ERROR(OneDnnGemm(one));
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(CacheEntry e, GetPrimitive(g));
  if (!e.implemented) {
    return absl::UnimplementedError(absl::StrCat(
        "Gemm: oneDNN has no ", ir::DTypeName(g.dtype), " matmul on this CPU"));
  }
  DnnlContext& ctx = Dnnl();
  try {
    dnnl::memory a(e.a_md, ctx.engine, const_cast<void*>(g.a));
    dnnl::memory b(e.b_md, ctx.engine, const_cast<void*>(g.b));
    dnnl::memory c(e.c_md, ctx.engine, g.c);
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (g.bias != nullptr) {
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(e.bias_md, ctx.engine,
                                               const_cast<void*>(g.bias)));
    }
    if (const size_t bytes = e.scratch_md.get_size(); bytes > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(e.scratch_md, ctx.engine,
                                                     DnnlScratchpad(bytes)));
    }
    e.prim.execute(ctx.stream, args);
    ctx.stream.wait();
  } catch (const dnnl::error& err) {
    return absl::InternalError(
        absl::StrCat("Gemm: oneDNN matmul failed: ", err.what()));
  }
  return absl::OkStatus();
}

// Whether oneDNN has a native matmul for a 16-bit dtype on this CPU. Checked
// on the 2-core AVX2 machines (oneDNN reports isa "Intel AVX2"): creating a
// bf16 or f16 matmul fails with dnnl_unimplemented ("could not create a
// primitive descriptor iterator"), with a 16-bit or an f32 destination alike;
// oneDNN 2.6's bf16 kernels need AVX-512. So there both dtypes widen to f32
// (ViaF32), costing ~40% over plain f32 on the MLP shapes (L1 fwd bf16
// 842 us vs f32 586 us through oneDNN). Where the probe succeeds, the native
// primitive is used and accumulates in f32.
bool HasNativeMatmul(DType t) {
  auto probe = [](DType d) {
    GemmArgs g{
        .dtype = d, .m = 16, .n = 16, .k = 16, .lda = 16, .ldb = 16, .ldc = 16};
    absl::StatusOr<CacheEntry> e = GetPrimitive(g);
    return e.ok() && e->implemented;
  };
  static const bool f16 = probe(DType::kF16);
  static const bool bf16 = probe(DType::kBF16);
  return t == DType::kF16 ? f16 : t == DType::kBF16 && bf16;
}

// ---- f16/bf16 without native kernels: widen to f32, multiply, round. ----

// Per-thread buffers reused across calls, so eager steps don't allocate.
struct Scratch {
  std::vector<float> a, b, c, bias;
};

// Copies `count` matrices of `e` (pitch ld, `stride` apart) densely into dst.
// f16 <-> f32 rows with the F16C instructions (8 lanes; IEEE round to
// nearest even, as ir::Half's conversions, which take the tail). The scalar
// conversions branch per element and were most of an f16 GEMM's time here.
bool HasF16c() {
  static const bool has =
      __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return has;
}

__attribute__((target("f16c,avx2"))) void HalfRowToFloat(const ir::Half* s,
                                                         float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                reinterpret_cast<const __m128i*>(s + i))));
  }
  for (; i < n; ++i) d[i] = float(s[i]);
}

__attribute__((target("f16c,avx2"))) void FloatRowToHalf(const float* s,
                                                         ir::Half* d,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(d + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(s + i),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) d[i] = ir::Half(s[i]);
}

template <typename From, typename To>
void CopyRow(const From* s, To* d, int64_t n) {
  if constexpr (std::is_same_v<From, ir::Half> && std::is_same_v<To, float>) {
    if (HasF16c()) return HalfRowToFloat(s, d, n);
  } else if constexpr (std::is_same_v<From, float> &&
                       std::is_same_v<To, ir::Half>) {
    if (HasF16c()) return FloatRowToHalf(s, d, n);
  }
  for (int64_t col = 0; col < n; ++col) d[col] = To(float(s[col]));
}

template <typename From, typename To>
void CopyMatrices(const From* src, int64_t count, int64_t stride, Extent e,
                  int64_t ld, To* dst, int64_t dst_ld, int64_t dst_stride) {
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t r = 0; r < e.rows; ++r) {
      CopyRow(src + i * stride + r * ld, dst + i * dst_stride + r * dst_ld,
              e.cols);
    }
  }
}

absl::Status F32Gemm(const GemmArgs& g, GemmBackend backend) {
  return backend == GemmBackend::kOpenBlas ? OpenBlasGemm<float>(g)
                                           : OneDnnGemm(g);
}

template <typename T>
absl::Status ViaF32(const GemmArgs& g, GemmBackend backend) {
  thread_local Scratch s;
  const Extent ea = StoredA(g), eb = StoredB(g), ec{g.m, g.n};
  const int64_t na = g.stride_a == 0 ? 1 : g.batch;
  const int64_t nb = g.stride_b == 0 ? 1 : g.batch;
  s.a.resize(na * ea.rows * ea.cols);
  s.b.resize(nb * eb.rows * eb.cols);
  s.c.resize(g.batch * ec.rows * ec.cols);
  CopyMatrices(static_cast<const T*>(g.a), na, g.stride_a, ea, g.lda,
               s.a.data(), ea.cols, ea.rows * ea.cols);
  CopyMatrices(static_cast<const T*>(g.b), nb, g.stride_b, eb, g.ldb,
               s.b.data(), eb.cols, eb.rows * eb.cols);
  if (g.accumulate) {
    CopyMatrices(static_cast<const T*>(g.c), g.batch, g.stride_c, ec, g.ldc,
                 s.c.data(), ec.cols, ec.rows * ec.cols);
  }
  GemmArgs f = g;
  if (g.bias != nullptr) {
    s.bias.resize(g.n);
    CopyMatrices(static_cast<const T*>(g.bias), 1, 0, Extent{1, g.n}, g.n,
                 s.bias.data(), g.n, g.n);
    f.bias = s.bias.data();
  }
  f.dtype = DType::kF32;
  f.a = s.a.data();
  f.lda = ea.cols;
  f.stride_a = na == 1 ? 0 : ea.rows * ea.cols;
  f.b = s.b.data();
  f.ldb = eb.cols;
  f.stride_b = nb == 1 ? 0 : eb.rows * eb.cols;
  f.c = s.c.data();
  f.ldc = ec.cols;
  f.stride_c = ec.rows * ec.cols;
  RETURN_IF_ERROR(F32Gemm(f, backend));
  CopyMatrices(s.c.data(), g.batch, f.stride_c, ec, f.ldc, static_cast<T*>(g.c),
               g.ldc, g.stride_c);
  return absl::OkStatus();
}

template <typename T>
absl::Status LowPrecisionGemm(const GemmArgs& g, GemmBackend backend) {
  if (backend == GemmBackend::kOneDnn) {
    absl::Status native = OneDnnGemm(g);
    if (!absl::IsUnimplemented(native)) return native;
  }
  return ViaF32<T>(g, backend);
}

// k == 0: the product is empty, so C = 0 (or stays as is when accumulating).
void ZeroC(const GemmArgs& g) {
  const int64_t size = ir::DTypeSize(g.dtype);
  for (int64_t i = 0; i < g.batch; ++i) {
    for (int64_t r = 0; r < g.m; ++r) {
      std::memset(static_cast<char*>(g.c) + (i * g.stride_c + r * g.ldc) * size,
                  0, g.n * size);
    }
  }
}

}  // namespace

// Measured on the 2-core AVX2 machines (bench/gemm_bench.cc, f32, median of
// 5, best of 2-5 passes taken while no other process ran; us):
//   MLP 784-512-512-10, batch 128     OpenBLAS  oneDNN
//   L1 fwd 128x512x784 NT                633      586
//   L1 dX  128x784x512 NN                642      618
//   L1 dW  512x784x128 TN                811      630
//   L2 fwd 128x512x512 NT                408      379
//   L2 dX  128x512x512 NN                560      416
//   L2 dW  512x512x128 TN                514      685
//   L3 fwd 128x10x512  NT                 39       20
//   L3 dX  128x512x10  NN                 41       20
//   L3 dW  10x512x128  TN                 48       20
//   all nine in sequence                5432     4211
//   ... with one busy thread beside    25432     8456
//   square NN 4 / 16 / 32       0.24 / 0.66 / 2.6  4.0 / 3.8 / 6.2
//   square NN 64 / 128                14 / 53  12.5 / 48
// oneDNN wins the step by 20-30% (3x when another thread takes a core),
// so it takes every f32 product except tiny ones, where its ~4 us per call
// (primitive lookup, memory objects) loses to OpenBLAS. L2 dW is left to
// oneDNN too: the same layout at L1 goes the other way, and mixing the two
// thread pools within a step is what the busy-thread row punishes. Below
// 2^17 multiply-adds OpenBLAS stays on the calling thread (it threads above
// 4 x 65536, openblas_config.h), so the two pools still never compete. Two
// threads (the default for both) beat one: the step takes 9.3 ms on one thread.
constexpr double kOneDnnMinMacs = 1 << 17;

GemmBackend ChooseBackend(const GemmArgs& g) {
  if (g.dtype == DType::kF64) {
    return GemmBackend::kOpenBlas;  // oneDNN 2.6 has no f64 data type
  }
  if ((g.dtype == DType::kF16 || g.dtype == DType::kBF16) &&
      HasNativeMatmul(g.dtype)) {
    return GemmBackend::kOneDnn;
  }
  // f32, and f16/bf16 multiplied in f32: one oneDNN call covers the batch.
  const double macs = static_cast<double>(g.batch) * g.m * g.n * g.k;
  return macs < kOneDnnMinMacs ? GemmBackend::kOpenBlas : GemmBackend::kOneDnn;
}

absl::Status Gemm(const GemmArgs& g) {
  // This OpenBLAS is the LP64 build: sizes and pitches travel as int.
  RETURN_IF_ERROR(ValidateGemmArgs(
      g, {.who = "Gemm", .says_transposed = true, .max_extent = INT_MAX}));
  if (g.bias_grad != nullptr) ComputeBiasGrad(g);
  if (g.batch == 0 || g.m == 0 || g.n == 0) return absl::OkStatus();
  if (g.k == 0) {
    if (!g.accumulate) ZeroC(g);
    ApplyEpilogueAnyDType(g);
    return absl::OkStatus();
  }
  const GemmBackend backend =
      g.backend == GemmBackend::kAuto ? ChooseBackend(g) : g.backend;
  if (backend == GemmBackend::kOneDnn && g.activation.has_value() &&
      DnnlActivation(g.activation) == dnnl::algorithm::undef) {
    // oneDNN has no exact post-op for this activation: the product alone,
    // then the bias and the activation in one pass over C.
    GemmArgs product = g;
    product.bias = nullptr;
    product.activation.reset();
    product.bias_grad = nullptr;
    RETURN_IF_ERROR(Gemm(product));
    ApplyEpilogueAnyDType(g);
    return absl::OkStatus();
  }
  switch (g.dtype) {
    case DType::kF32:
      return F32Gemm(g, backend);
    case DType::kF64:
      if (backend == GemmBackend::kOneDnn) {
        return absl::UnimplementedError(
            "Gemm: expected backend openblas or auto for f64 (oneDNN 2.6 has "
            "no f64 matmul), got onednn");
      }
      return OpenBlasGemm<double>(g);
    case DType::kF16:
      return LowPrecisionGemm<ir::Half>(g, backend);
    case DType::kBF16:
      return LowPrecisionGemm<ir::BFloat16>(g, backend);
    default:  // ValidateGemmArgs rejected the other dtypes
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm: unsupported dtype ", ir::DTypeName(g.dtype)));
  }
}

}  // namespace stepjit::runtime::cpu
