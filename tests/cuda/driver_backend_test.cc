// The driver backend and cuBLASLt. Everywhere: the clear error without a
// GPU, the kernel-architecture choice, the cuBLASLt loader, the epilogue
// kernels compiling with NVRTC, and the row-major -> column-major GEMM plan,
// proven by interpreting it with column-major BLAS semantics on the host and
// comparing with runtime::cpu::Gemm. With a GPU: memory, copies, events,
// NVRTC launches, graphs, and cuBLASLt GEMMs against runtime::cpu::Gemm.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/cuda/nvrtc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/dtype.h"
#include "ir/host_math.h"
#include "ir/scalar_def.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/cublaslt_epilogue.h"
#include "runtime/cuda/cublaslt_library.h"
#include "runtime/cuda/cublaslt_plan.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/driver_backend.h"

namespace stepjit::runtime::cuda {
namespace {

using cpu::GemmActivation;
using ir::DType;
using ::testing::HasSubstr;

constexpr GemmActivation kActivations[] = {
    GemmActivation::kNone, GemmActivation::kRelu, GemmActivation::kGelu,
    GemmActivation::kGeluTanh};

// ---- Without a GPU --------------------------------------------------------

TEST(DriverBackendTest, MakeReportsWhyThereIsNoDevice) {
  absl::StatusOr<std::unique_ptr<Backend>> b = MakeDriverBackend();
  const CudaAvailability& a = Availability();
  if (a.available) {
    ASSERT_TRUE(b.ok()) << b.status();
    std::printf("driver backend: %s, kernels for %s\n",
                (*b)->Describe().c_str(), (*b)->Arch().c_str());
    EXPECT_THAT((*b)->Describe(), HasSubstr(a.devices[0].arch()));
    EXPECT_TRUE(absl::StartsWith((*b)->Arch(), "sm_")) << (*b)->Arch();
    EXPECT_GE((*b)->Limits().max_grid, 65535);
    EXPECT_GE((*b)->Limits().max_block, 256);
    EXPECT_TRUE(absl::IsInvalidArgument(
        MakeDriverBackend(static_cast<int>(a.devices.size())).status()));
    return;
  }
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::IsUnavailable(b.status())) << b.status();
  EXPECT_EQ(b.status().message(), a.reason);
  // "no CUDA driver: cannot load libcuda.so.1 (...)", "no usable CUDA
  // device: cuInit failed with ...", "no CUDA devices: ...".
  EXPECT_TRUE(absl::StartsWith(a.reason, "no CUDA driver") ||
              absl::StartsWith(a.reason, "no usable CUDA device") ||
              absl::StartsWith(a.reason, "no CUDA devices") ||
              absl::StartsWith(a.reason, "the CUDA driver"))
      << a.reason;
}

TEST(DriverBackendTest, PicksTheNewestCompatibleArchitecture) {
  const std::vector<std::string> nvrtc = {"sm_75", "sm_80", "sm_86",
                                          "sm_89", "sm_90", "sm_100"};
  EXPECT_EQ(PickKernelArch("sm_90", nvrtc), "sm_90");
  EXPECT_EQ(PickKernelArch("sm_100", nvrtc), "sm_100");
  EXPECT_EQ(PickKernelArch("sm_87", nvrtc), "sm_86");  // same major, older
  EXPECT_EQ(PickKernelArch("sm_103", nvrtc), "sm_100");
  EXPECT_EQ(PickKernelArch("sm_70", nvrtc), "");   // no sm_7x <= 7.0
  EXPECT_EQ(PickKernelArch("sm_120", nvrtc), "");  // newer than NVRTC
  EXPECT_EQ(PickKernelArch("gfx90a", nvrtc), "");
}

TEST(CublasLtTest, LoadsWithoutAGpuWhereTheLibraryExists) {
  bool present = false;
  for (const char* f : {"/usr/local/cuda/lib64/libcublasLt.so.13",
                        "/usr/local/cuda/lib64/libcublasLt.so.12",
                        "/usr/local/cuda/lib64/libcublasLt.so"}) {
    present = present || std::filesystem::exists(f);
  }
  absl::StatusOr<const CublasLtLibrary*> lt = LoadCublasLt();
  if (!lt.ok()) {
    EXPECT_FALSE(present) << lt.status();
    EXPECT_TRUE(absl::IsNotFound(lt.status())) << lt.status();
    EXPECT_THAT(lt.status().message(), HasSubstr("cuBLASLt not found: tried"));
    GTEST_SKIP() << lt.status();
  }
  std::printf("cuBLASLt %zu from %s\n", (*lt)->version, (*lt)->path.c_str());
  EXPECT_THAT((*lt)->path, HasSubstr("libcublasLt.so"));
  EXPECT_GE((*lt)->version, 120000u);  // cublasLtGetVersion resolved and ran
  EXPECT_NE((*lt)->api, nullptr);
  EXPECT_EQ(*LoadCublasLt(), *lt) << "opened once";
}

TEST(CublasLtTest, EpilogueKernelsCompileWithNvrtc) {
  if (!codegen::cuda::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
  for (DType t : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    for (GemmActivation act : kActivations) {
      const EpilogueKernelSource k = GemmEpilogueKernel(t, act);
      EXPECT_THAT(k.source, HasSubstr(absl::StrCat("void ", k.name, "(")));
      codegen::cuda::NvrtcOptions options;
      options.arch = "sm_90";
      options.use_cache = false;
      absl::StatusOr<codegen::cuda::CompiledCuda> c =
          codegen::cuda::CompileCuda(k.source, k.name, options);
      ASSERT_TRUE(c.ok()) << c.status() << "\n" << k.source;
      EXPECT_FALSE(c->cubin.empty());
    }
  }
  // The exact GELU uses erf; the tanh one tanh; f64 computes in double.
  EXPECT_THAT(GemmEpilogueKernel(DType::kF32, GemmActivation::kGelu).source,
              HasSubstr("erff("));
  EXPECT_THAT(GemmEpilogueKernel(DType::kF64, GemmActivation::kGelu).source,
              HasSubstr("erf("));
  EXPECT_THAT(
      GemmEpilogueKernel(DType::kBF16, GemmActivation::kGeluTanh).source,
      HasSubstr("tanhf("));
}

// ---- The plan -------------------------------------------------------------

double Get(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF64:
      return static_cast<const double*>(p)[i];
    case DType::kF16:
      return static_cast<const ir::Half*>(p)[i];
    case DType::kBF16:
      return static_cast<const ir::BFloat16*>(p)[i];
    default:
      return static_cast<const float*>(p)[i];
  }
}

void Put(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::kF64:
      static_cast<double*>(p)[i] = v;
      break;
    case DType::kF16:
      static_cast<ir::Half*>(p)[i] = ir::Half(static_cast<float>(v));
      break;
    case DType::kBF16:
      static_cast<ir::BFloat16*>(p)[i] = ir::BFloat16(static_cast<float>(v));
      break;
    default:
      static_cast<float*>(p)[i] = static_cast<float>(v);
  }
}

DType FromLt(LtDataType t) {
  switch (t) {
    case LtDataType::kF64:
      return DType::kF64;
    case LtDataType::kF16:
      return DType::kF16;
    case LtDataType::kBF16:
      return DType::kBF16;
    default:
      return DType::kF32;
  }
}

double Activate(GemmActivation act, double x) {
  ir::HostMath<double> m;
  switch (act) {
    case GemmActivation::kRelu:
      return ir::ScalarDef<ir::OpId::kRelu>::Apply(m, x);
    case GemmActivation::kGelu:
      return ir::ScalarDef<ir::OpId::kGelu>::Apply(m, x);
    case GemmActivation::kGeluTanh:
      return ir::ScalarDef<ir::OpId::kGeluTanh>::Apply(m, x);
    default:
      return x;
  }
}

// Runs `p` as cuBLASLt defines it, in double: per batch element,
// column-major D = epilogue(alpha op_a(A) op_b(B) + beta C), then the
// epilogue kernel's row-major pass. Checks the layouts are the ones the ops
// need (A m x k after op_a, and so on) first.
void RunPlanOnHost(const LtPlan& p) {
  if (p.no_work) return;
  const DType t = FromLt(p.data_type);
  auto stored = [](LtOp op, int64_t r, int64_t c) {
    return op == LtOp::kN ? std::make_pair(r, c) : std::make_pair(c, r);
  };
  ASSERT_EQ(std::make_pair(p.a.rows, p.a.cols), stored(p.op_a, p.m, p.k));
  ASSERT_EQ(std::make_pair(p.b.rows, p.b.cols), stored(p.op_b, p.k, p.n));
  ASSERT_EQ(p.c.rows, p.m);
  ASSERT_EQ(p.c.cols, p.n);
  for (const LtMatrix* x : {&p.a, &p.b, &p.c})
    ASSERT_GE(x->ld, std::max<int64_t>(1, x->rows));
  auto at = [](const LtMatrix& x, int64_t b, int64_t r, int64_t c) {
    return b * x.batch_stride + r + c * x.ld;
  };
  void* c_ptr = const_cast<void*>(p.c.ptr);
  const bool bias = p.epilogue == LtEpilogue::kBias ||
                    p.epilogue == LtEpilogue::kReluBias ||
                    p.epilogue == LtEpilogue::kGeluBias;
  ASSERT_EQ(bias, p.bias != nullptr);
  GemmActivation act = GemmActivation::kNone;
  if (p.epilogue == LtEpilogue::kRelu || p.epilogue == LtEpilogue::kReluBias)
    act = GemmActivation::kRelu;
  if (p.epilogue == LtEpilogue::kGelu || p.epilogue == LtEpilogue::kGeluBias)
    act = GemmActivation::kGeluTanh;
  for (int64_t b = 0; b < p.batch && !p.skip_product; ++b) {
    for (int64_t j = 0; j < p.n; ++j) {
      for (int64_t i = 0; i < p.m; ++i) {
        double sum = 0;
        for (int64_t l = 0; l < p.k; ++l) {
          const int64_t ia =
              p.op_a == LtOp::kN ? at(p.a, b, i, l) : at(p.a, b, l, i);
          const int64_t ib =
              p.op_b == LtOp::kN ? at(p.b, b, l, j) : at(p.b, b, j, l);
          sum += Get(p.a.ptr, t, ia) * Get(p.b.ptr, t, ib);
        }
        double x = p.alpha * sum;
        if (p.beta != 0) x += p.beta * Get(c_ptr, t, at(p.c, b, i, j));
        if (bias) x += Get(p.bias, t, i);  // one per row of D
        Put(c_ptr, t, at(p.c, b, i, j), Activate(act, x));
      }
    }
  }
  if (!p.skip_product && p.post_bias == nullptr &&
      p.post_activation == GemmActivation::kNone) {
    return;
  }
  // The kernel's view: the caller's row-major C, rows x cols.
  const int64_t rows = p.n, cols = p.m;
  const bool keep_c = !p.skip_product || p.beta != 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t col = 0; col < cols; ++col) {
        const int64_t i = b * p.c.batch_stride + r * p.c.ld + col;
        double x = keep_c ? Get(c_ptr, t, i) : 0;
        if (p.post_bias != nullptr) x += Get(p.post_bias, t, col);
        Put(c_ptr, t, i, Activate(p.post_activation, x));
      }
    }
  }
}

// Host operands for one GEMM, random, with padded leading dimensions.
struct GemmCase {
  DType dtype = DType::kF32;
  bool trans_a = false, trans_b = false;
  int64_t m = 5, n = 7, k = 4;
  int64_t batch = 1;
  bool broadcast_a = false, broadcast_b = false;
  bool bias = false;
  GemmActivation activation = GemmActivation::kNone;
  bool accumulate = false;
  bool allow_tf32 = false;

  std::string Name() const {
    return absl::StrCat(
        ir::DTypeName(dtype), allow_tf32 ? "(tf32)" : "", " ",
        trans_a ? "T" : "N", trans_b ? "T" : "N", " m=", m, " n=", n, " k=", k,
        " batch=", batch, broadcast_a ? " bcastA" : "",
        broadcast_b ? " bcastB" : "", bias ? " +bias" : "", " ",
        cpu::GemmActivationName(activation), accumulate ? " +=C" : "");
  }
};

struct HostGemm {
  GemmCase c;
  std::vector<char> a, b, out, bias;
  cpu::GemmArgs args;  // pointing into the vectors above

  explicit HostGemm(const GemmCase& gc, uint32_t seed) : c(gc) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal;
    const size_t es = ir::DTypeSize(c.dtype);
    auto fill = [&](std::vector<char>& v, int64_t n) {
      v.resize(static_cast<size_t>(std::max<int64_t>(n, 1) * es));
      for (int64_t i = 0; i < n; ++i) Put(v.data(), c.dtype, i, normal(gen));
    };
    cpu::GemmArgs& g = args;
    g.dtype = c.dtype;
    g.trans_a = c.trans_a;
    g.trans_b = c.trans_b;
    g.m = c.m;
    g.n = c.n;
    g.k = c.k;
    g.lda = (c.trans_a ? c.m : c.k) + 3;
    g.ldb = (c.trans_b ? c.k : c.n) + 2;
    g.ldc = c.n + 1;
    const int64_t size_a = (c.trans_a ? c.k : c.m) * g.lda;
    const int64_t size_b = (c.trans_b ? c.n : c.k) * g.ldb;
    const int64_t size_c = c.m * g.ldc;
    g.batch = c.batch;
    g.stride_a = c.broadcast_a ? 0 : size_a + 5;
    g.stride_b = c.broadcast_b ? 0 : size_b + 1;
    g.stride_c = size_c + 3;
    fill(a, g.stride_a * (c.batch - 1) + size_a);
    fill(b, g.stride_b * (c.batch - 1) + size_b);
    fill(out, g.stride_c * (c.batch - 1) + size_c);
    g.a = a.data();
    g.b = b.data();
    g.c = out.data();
    if (c.bias) {
      fill(bias, c.n);
      g.bias = bias.data();
    }
    g.activation = c.activation;
    g.accumulate = c.accumulate;
  }

  DeviceGemmArgs Device() const {
    DeviceGemmArgs d;
    d.gemm = args;
    d.allow_tf32 = c.allow_tf32;
    return d;
  }

  // Per element of C: sum |a||b| + |bias| + |C before|, the size rounding
  // errors are relative to.
  std::vector<double> Scale(const std::vector<char>& c_before) const {
    const cpu::GemmArgs& g = args;
    std::vector<double> s(out.size() / ir::DTypeSize(g.dtype), 0);
    for (int64_t bt = 0; bt < g.batch; ++bt) {
      for (int64_t i = 0; i < g.m; ++i) {
        for (int64_t j = 0; j < g.n; ++j) {
          double v = 0;
          for (int64_t l = 0; l < g.k; ++l) {
            const int64_t ia =
                bt * g.stride_a + (g.trans_a ? l * g.lda + i : i * g.lda + l);
            const int64_t ib =
                bt * g.stride_b + (g.trans_b ? j * g.ldb + l : l * g.ldb + j);
            v += std::abs(Get(g.a, g.dtype, ia) * Get(g.b, g.dtype, ib));
          }
          const int64_t ic = bt * g.stride_c + i * g.ldc + j;
          if (g.bias != nullptr) v += std::abs(Get(g.bias, g.dtype, j));
          if (g.accumulate) v += std::abs(Get(c_before.data(), g.dtype, ic));
          s[ic] = std::max(v, 1.0);
        }
      }
    }
    return s;
  }
};

// Elements of C (inside the matrices, not the padding) that differ by more
// than tol * scale; the padding must be untouched.
void ExpectClose(const GemmCase& gc, const cpu::GemmArgs& g,
                 const std::vector<char>& got, const std::vector<char>& want,
                 const std::vector<double>& scale, double tol) {
  int bad = 0;
  const int64_t n = static_cast<int64_t>(want.size() / ir::DTypeSize(g.dtype));
  for (int64_t i = 0; i < n; ++i) {
    const double x = Get(got.data(), g.dtype, i);
    const double y = Get(want.data(), g.dtype, i);
    if (scale[i] == 0) {  // padding
      if (std::memcmp(&got[i * ir::DTypeSize(g.dtype)],
                      &want[i * ir::DTypeSize(g.dtype)],
                      ir::DTypeSize(g.dtype)) != 0 &&
          ++bad <= 3) {
        ADD_FAILURE() << gc.Name() << ": padding element " << i
                      << " changed: " << x << " vs " << y;
      }
      continue;
    }
    if (!(std::abs(x - y) <= tol * scale[i]) && ++bad <= 3) {
      ADD_FAILURE() << gc.Name() << ": element " << i << " is " << x
                    << ", expected " << y << " (tolerance " << tol * scale[i]
                    << ")";
    }
  }
  EXPECT_EQ(bad, 0) << gc.Name();
}

double HostTolerance(DType t) {
  switch (t) {
    case DType::kF64:
      return 1e-12;
    case DType::kF32:
      return 1e-5;
    default:
      return 1e-2;  // one rounding of C to 8 (bf16) or 11 (f16) bits
  }
}

std::vector<GemmCase> AllCases(DType dtype, int64_t m, int64_t n, int64_t k) {
  std::vector<GemmCase> out;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int shape = 0; shape < 3; ++shape) {  // batch 1, 3, 3 broadcast
        for (bool bias : {false, true}) {
          for (GemmActivation act : kActivations) {
            for (bool acc : {false, true}) {
              GemmCase c;
              c.dtype = dtype;
              c.trans_a = ta;
              c.trans_b = tb;
              c.m = m;
              c.n = n;
              c.k = k;
              c.batch = shape == 0 ? 1 : 3;
              c.broadcast_a = shape == 2 && tb;
              c.broadcast_b = shape == 2 && !tb;
              c.bias = bias;
              c.activation = act;
              c.accumulate = acc;
              out.push_back(c);
            }
          }
        }
      }
    }
  }
  return out;
}

TEST(LtPlanTest, MatchesCpuGemmOnTheHost) {
  int cases = 0;
  for (DType t : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    for (const GemmCase& gc : AllCases(t, 5, 7, 4)) {
      for (bool fuse : {true, false}) {
        HostGemm h(gc, 1234 + cases);
        std::vector<char> before = h.out;
        std::vector<char> want = h.out;
        cpu::GemmArgs cpu_args = h.args;
        cpu_args.c = want.data();
        ASSERT_TRUE(cpu::Gemm(cpu_args).ok()) << gc.Name();
        absl::StatusOr<LtPlan> plan = PlanLtGemm(h.Device(), fuse);
        ASSERT_TRUE(plan.ok()) << plan.status();
        RunPlanOnHost(*plan);
        if (HasFatalFailure()) return;
        std::vector<double> scale = h.Scale(before);
        ExpectClose(gc, h.args, h.out, want, scale, HostTolerance(t));
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 4 * 2 * 2 * 3 * 2 * 4 * 2 * 2);
}

TEST(LtPlanTest, EmptyProductsNeedNoCublasLt) {
  for (bool acc : {false, true}) {
    GemmCase gc;
    gc.k = 0;
    gc.bias = true;
    gc.activation = GemmActivation::kGelu;
    gc.accumulate = acc;
    gc.batch = 2;
    HostGemm h(gc, 7);
    std::vector<char> before = h.out, want = h.out;
    cpu::GemmArgs cpu_args = h.args;
    cpu_args.c = want.data();
    ASSERT_TRUE(cpu::Gemm(cpu_args).ok());
    absl::StatusOr<LtPlan> plan = PlanLtGemm(h.Device());
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->skip_product);
    EXPECT_EQ(plan->post_activation, GemmActivation::kGelu);
    EXPECT_EQ(plan->post_bias, h.args.bias);
    RunPlanOnHost(*plan);
    ExpectClose(gc, h.args, h.out, want, h.Scale(before), 1e-6);
  }
  GemmCase empty;
  empty.m = 0;
  HostGemm h(empty, 8);
  absl::StatusOr<LtPlan> plan = PlanLtGemm(h.Device());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->no_work);
}

TEST(LtPlanTest, TypesAndEpilogues) {
  struct {
    DType dtype;
    bool tf32;
    LtDataType data;
    LtDataType scale;
    LtComputeType compute;
  } const types[] = {
      {DType::kF32, false, LtDataType::kF32, LtDataType::kF32,
       LtComputeType::k32F},
      {DType::kF32, true, LtDataType::kF32, LtDataType::kF32,
       LtComputeType::k32FFastTF32},
      {DType::kF16, true, LtDataType::kF16, LtDataType::kF32,
       LtComputeType::k32F},
      {DType::kBF16, false, LtDataType::kBF16, LtDataType::kF32,
       LtComputeType::k32F},
      {DType::kF64, true, LtDataType::kF64, LtDataType::kF64,
       LtComputeType::k64F},
  };
  for (const auto& t : types) {
    GemmCase gc;
    gc.dtype = t.dtype;
    gc.allow_tf32 = t.tf32;
    HostGemm h(gc, 1);
    absl::StatusOr<LtPlan> p = PlanLtGemm(h.Device());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->data_type, t.data) << gc.Name();
    EXPECT_EQ(p->scale_type, t.scale) << gc.Name();
    EXPECT_EQ(p->compute_type, t.compute) << gc.Name();
    // Operands swap: cuBLASLt's A is the caller's B; m and n trade places.
    EXPECT_EQ(p->a.ptr, h.args.b);
    EXPECT_EQ(p->b.ptr, h.args.a);
    EXPECT_EQ(p->m, h.args.n);
    EXPECT_EQ(p->n, h.args.m);
  }
  struct {
    bool bias;
    GemmActivation act;
    LtEpilogue epilogue;
    GemmActivation post;
  } const epilogues[] = {
      {false, GemmActivation::kNone, LtEpilogue::kDefault,
       GemmActivation::kNone},
      {true, GemmActivation::kNone, LtEpilogue::kBias, GemmActivation::kNone},
      {false, GemmActivation::kRelu, LtEpilogue::kRelu, GemmActivation::kNone},
      {true, GemmActivation::kRelu, LtEpilogue::kReluBias,
       GemmActivation::kNone},
      {false, GemmActivation::kGeluTanh, LtEpilogue::kGelu,
       GemmActivation::kNone},
      {true, GemmActivation::kGeluTanh, LtEpilogue::kGeluBias,
       GemmActivation::kNone},
      // cuBLASLt has no exact GELU: bias in the epilogue, erf in the kernel.
      {false, GemmActivation::kGelu, LtEpilogue::kDefault,
       GemmActivation::kGelu},
      {true, GemmActivation::kGelu, LtEpilogue::kBias, GemmActivation::kGelu},
  };
  for (const auto& e : epilogues) {
    GemmCase gc;
    gc.bias = e.bias;
    gc.activation = e.act;
    HostGemm h(gc, 2);
    absl::StatusOr<LtPlan> p = PlanLtGemm(h.Device());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->epilogue, e.epilogue) << gc.Name();
    EXPECT_EQ(p->post_activation, e.post) << gc.Name();
    EXPECT_EQ(p->bias, e.epilogue == LtEpilogue::kDefault ||
                               e.epilogue == LtEpilogue::kRelu ||
                               e.epilogue == LtEpilogue::kGelu
                           ? nullptr
                           : h.args.bias);
    EXPECT_EQ(p->post_bias, nullptr) << gc.Name();
    // Unfused: the plain product, everything else in the kernel.
    absl::StatusOr<LtPlan> u = PlanLtGemm(h.Device(), /*fuse_epilogue=*/false);
    ASSERT_TRUE(u.ok()) << u.status();
    EXPECT_EQ(u->epilogue, LtEpilogue::kDefault);
    EXPECT_EQ(u->post_activation, e.act);
    EXPECT_EQ(u->post_bias, h.args.bias);
  }
}

TEST(LtPlanTest, RefusesWhatCpuGemmRefuses) {
  GemmCase gc;
  HostGemm h(gc, 3);
  auto refused = [](DeviceGemmArgs d, absl::string_view want) {
    absl::StatusOr<LtPlan> p = PlanLtGemm(d);
    EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
    EXPECT_THAT(p.status().message(), HasSubstr(want));
  };
  DeviceGemmArgs d = h.Device();
  d.gemm.dtype = DType::kI32;
  refused(d, "expected dtype f32, f64, f16 or bf16, got i32");
  d = h.Device();
  d.gemm.lda = 3;
  refused(d, "expected lda >= 4 (A is stored 5x4), got 3");
  d = h.Device();
  d.gemm.batch = 2;
  d.gemm.stride_c = 0;
  refused(d, "expected stride_c > 0 for batch=2");
  d = h.Device();
  d.gemm.b = nullptr;
  refused(d, "expected a non-null pointer for B");
  d = h.Device();
  d.gemm.k = -1;
  refused(d, "expected non-negative sizes");
}

// ---- With a GPU -------------------------------------------------------------

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Availability().available) GTEST_SKIP() << Availability().reason;
    static Backend* const shared = [] {
      absl::StatusOr<std::unique_ptr<Backend>> b = MakeDriverBackend();
      if (!b.ok()) {
        ADD_FAILURE() << b.status();
        return static_cast<Backend*>(nullptr);
      }
      return b->release();
    }();
    ASSERT_NE(shared, nullptr);
    b_ = shared;
  }

  // Device copy of `host`, freed with the test.
  void* ToDevice(const std::vector<char>& host) {
    absl::StatusOr<void*> p = b_->DeviceAlloc(host.size());
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    EXPECT_TRUE(
        b_->Copy(*p, host.data(), host.size(), CopyKind::kHostToDevice, 0)
            .ok());
    owned_.push_back(*p);
    return *p;
  }
  std::vector<char> ToHost(const void* dev, size_t bytes) {
    std::vector<char> out(bytes);
    EXPECT_TRUE(
        b_->Copy(out.data(), dev, bytes, CopyKind::kDeviceToHost, 0).ok());
    return out;
  }
  void TearDown() override {
    if (b_ == nullptr) return;
    EXPECT_TRUE(b_->SynchronizeDevice().ok());
    for (void* p : owned_) EXPECT_TRUE(b_->DeviceFree(p).ok());
  }

  static constexpr const char* kAddOne = R"(
extern "C" __global__ void add_one(float* x, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    x[i] += 1.0f;
}
)";

  Backend* b_ = nullptr;
  std::vector<void*> owned_;
};

TEST_F(GpuTest, CopiesRoundTripSyncAndAsync) {
  constexpr size_t kBytes = 3 << 20;
  std::vector<char> in(kBytes);
  for (size_t i = 0; i < kBytes; ++i) in[i] = static_cast<char>(i * 13 + 1);
  // Pageable memory on stream 0: each call returns with the host side done.
  void* dev = ToDevice(in);
  ASSERT_NE(dev, nullptr);
  ASSERT_TRUE(b_->Memset(static_cast<char*>(dev) + 100, 0xab, 50, 0).ok());
  std::vector<char> want = in;
  std::memset(&want[100], 0xab, 50);
  EXPECT_EQ(ToHost(dev, kBytes), want);

  // Pinned memory on a stream of our own: async until synchronized.
  absl::StatusOr<Stream> s = b_->CreateStream();
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<void*> pin_in = b_->HostAllocPinned(kBytes);
  absl::StatusOr<void*> pin_out = b_->HostAllocPinned(kBytes);
  ASSERT_TRUE(pin_in.ok() && pin_out.ok()) << pin_in.status();
  std::memcpy(*pin_in, in.data(), kBytes);
  std::memset(*pin_out, 0, kBytes);
  absl::StatusOr<void*> dev2 = b_->DeviceAlloc(kBytes);
  ASSERT_TRUE(dev2.ok()) << dev2.status();
  owned_.push_back(*dev2);
  ASSERT_TRUE(
      b_->Copy(*dev2, *pin_in, kBytes, CopyKind::kHostToDevice, *s).ok());
  ASSERT_TRUE(b_->Copy(dev, *dev2, kBytes, CopyKind::kDeviceToDevice, *s).ok());
  ASSERT_TRUE(
      b_->Copy(*pin_out, dev, kBytes, CopyKind::kDeviceToHost, *s).ok());
  ASSERT_TRUE(b_->SynchronizeStream(*s).ok());
  EXPECT_EQ(std::memcmp(*pin_out, in.data(), kBytes), 0);
  EXPECT_TRUE(b_->HostFreePinned(*pin_in).ok());
  EXPECT_TRUE(b_->HostFreePinned(*pin_out).ok());
  EXPECT_TRUE(b_->DestroyStream(*s).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(b_->DestroyStream(0)));

  // Out of memory is ResourceExhausted naming the call and the size.
  absl::StatusOr<void*> huge = b_->DeviceAlloc(size_t{1} << 50);
  EXPECT_TRUE(absl::IsResourceExhausted(huge.status())) << huge.status();
  EXPECT_THAT(huge.status().message(),
              HasSubstr("cuMemAlloc(1125899906842624 bytes): "
                        "CUDA_ERROR_OUT_OF_MEMORY"));
}

TEST_F(GpuTest, EventsTimeAndOrderStreams) {
  absl::StatusOr<Stream> s1 = b_->CreateStream();
  absl::StatusOr<Stream> s2 = b_->CreateStream();
  absl::StatusOr<Event> start = b_->CreateEvent();
  absl::StatusOr<Event> end = b_->CreateEvent();
  ASSERT_TRUE(s1.ok() && s2.ok() && start.ok() && end.ok());
  constexpr size_t kBytes = size_t{256} << 20;
  absl::StatusOr<void*> big = b_->DeviceAlloc(kBytes);
  ASSERT_TRUE(big.ok()) << big.status();
  owned_.push_back(*big);
  ASSERT_TRUE(b_->RecordEvent(*start, *s1).ok());
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(
        b_->Memset(*big, static_cast<uint8_t>(i + 1), kBytes, *s1).ok());
  ASSERT_TRUE(b_->RecordEvent(*end, *s1).ok());
  // s2 reads the buffer only after s1's fills.
  ASSERT_TRUE(b_->StreamWaitEvent(*s2, *end).ok());
  absl::StatusOr<void*> pin = b_->HostAllocPinned(64);
  ASSERT_TRUE(pin.ok()) << pin.status();
  ASSERT_TRUE(b_->Copy(*pin, static_cast<char*>(*big) + kBytes - 64, 64,
                       CopyKind::kDeviceToHost, *s2)
                  .ok());
  ASSERT_TRUE(b_->SynchronizeEvent(*end).ok());
  absl::StatusOr<bool> done = b_->QueryEvent(*end);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done);
  absl::StatusOr<float> ms = b_->ElapsedMs(*start, *end);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GT(*ms, 0.0f);
  std::printf("4 x memset of 256 MiB: %.3f ms\n", *ms);
  ASSERT_TRUE(b_->SynchronizeStream(*s2).ok());
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(static_cast<uint8_t*>(*pin)[i], 4) << i;
  EXPECT_TRUE(b_->HostFreePinned(*pin).ok());
  b_->DestroyEvent(*start);
  b_->DestroyEvent(*end);
  EXPECT_TRUE(b_->DestroyStream(*s1).ok());
  EXPECT_TRUE(b_->DestroyStream(*s2).ok());
}

TEST_F(GpuTest, LaunchesAnNvrtcKernel) {
  absl::StatusOr<std::shared_ptr<LoadedModule>> m =
      b_->LoadSource(kAddOne, "add_one_test", {"add_one"});
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<KernelHandle> k = (*m)->Function("add_one");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(absl::IsNotFound((*m)->Function("add_two").status()));
  constexpr long long kN = 1 << 20;
  std::vector<float> host(kN);
  for (long long i = 0; i < kN; ++i) host[i] = static_cast<float>(i);
  std::vector<char> bytes(kN * 4);
  std::memcpy(bytes.data(), host.data(), bytes.size());
  void* x = ToDevice(bytes);
  long long n = kN;
  void* args[] = {&x, &n};
  ASSERT_TRUE(b_->Launch(*k, 64, 256, args, 0).ok());  // grid-stride loop
  EXPECT_TRUE(absl::IsInvalidArgument(b_->Launch(*k, 1, 4096, args, 0)));
  std::vector<char> out = ToHost(x, bytes.size());
  const float* f = reinterpret_cast<const float*>(out.data());
  for (long long i = 0; i < kN; i += 4097) EXPECT_EQ(f[i], i + 1.0f) << i;

  absl::StatusOr<std::shared_ptr<LoadedModule>> bad = b_->LoadSource(
      "extern \"C\" __global__ void f() { nope; }", "bad", {"f"});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("nope"));
  absl::StatusOr<std::shared_ptr<LoadedModule>> missing =
      b_->LoadSource(kAddOne, "add_one_test", {"add_one", "add_two"});
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
}

TEST_F(GpuTest, CapturesAndReplaysAGraph) {
  absl::StatusOr<std::shared_ptr<LoadedModule>> m =
      b_->LoadSource(kAddOne, "add_one_test", {"add_one"});
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<KernelHandle> k = (*m)->Function("add_one");
  ASSERT_TRUE(k.ok()) << k.status();
  absl::StatusOr<Stream> s = b_->CreateStream();
  ASSERT_TRUE(s.ok()) << s.status();
  constexpr long long kN = 1000;
  absl::StatusOr<void*> pin = b_->HostAllocPinned(kN * 4);
  ASSERT_TRUE(pin.ok()) << pin.status();
  float* src = static_cast<float*>(*pin);
  for (long long i = 0; i < kN; ++i) src[i] = static_cast<float>(i);
  void* x = ToDevice(std::vector<char>(kN * 4, 0));
  long long n = kN;
  void* args[] = {&x, &n};

  ASSERT_TRUE(b_->BeginCapture(*s).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(b_->BeginCapture(*s)));
  ASSERT_TRUE(b_->Copy(x, src, kN * 4, CopyKind::kHostToDevice, *s).ok());
  ASSERT_TRUE(b_->Launch(*k, 4, 256, args, *s).ok());
  ASSERT_TRUE(b_->Launch(*k, 4, 256, args, *s).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(b_->SynchronizeStream(*s)));
  EXPECT_TRUE(absl::IsFailedPrecondition(b_->SynchronizeDevice()));
  absl::StatusOr<GraphHandle> g = b_->EndCapture(*s);
  ASSERT_TRUE(g.ok()) << g.status();
  // Recorded, not run.
  std::vector<char> out = ToHost(x, kN * 4);
  EXPECT_EQ(reinterpret_cast<const float*>(out.data())[10], 0.0f);

  for (float base : {0.0f, 100.0f}) {
    for (long long i = 0; i < kN; ++i) src[i] = base + static_cast<float>(i);
    ASSERT_TRUE(b_->LaunchGraph(*g, *s).ok());
    ASSERT_TRUE(b_->SynchronizeStream(*s).ok());
    out = ToHost(x, kN * 4);
    const float* f = reinterpret_cast<const float*>(out.data());
    for (long long i = 0; i < kN; i += 37)
      EXPECT_EQ(f[i], base + static_cast<float>(i) + 2.0f) << i;
  }
  b_->DestroyGraph(*g);
  EXPECT_TRUE(b_->HostFreePinned(*pin).ok());
  EXPECT_TRUE(b_->DestroyStream(*s).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(b_->EndCapture(*s).status()));
}

// Tolerance relative to sum |a||b| + |bias| + |C|, per dtype.
double DeviceTolerance(const GemmCase& c) {
  switch (c.dtype) {
    case DType::kF64:
      return 1e-12;
    case DType::kF32:
      if (c.allow_tf32) return 3e-3;  // inputs rounded to 10-bit mantissas
      // cuBLASLt's GELU epilogue may evaluate tanh less exactly than libm.
      return c.activation == GemmActivation::kGeluTanh ? 1e-4 : 1e-5;
    case DType::kF16:
      return 1e-2;  // C rounded to 11 bits, twice with an exact GELU
    default:
      return 2e-2;  // bf16: 8 bits
  }
}

void RunOnDevice(Backend* b, const GemmCase& gc, uint32_t seed,
                 Stream stream = 0) {
  HostGemm h(gc, seed);
  std::vector<char> before = h.out, want = h.out;
  cpu::GemmArgs cpu_args = h.args;
  cpu_args.c = want.data();
  ASSERT_TRUE(cpu::Gemm(cpu_args).ok()) << gc.Name();
  auto upload = [&](const std::vector<char>& v) -> void* {
    absl::StatusOr<void*> p = b->DeviceAlloc(v.size());
    EXPECT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(
        b->Copy(*p, v.data(), v.size(), CopyKind::kHostToDevice, stream).ok());
    return *p;
  };
  DeviceGemmArgs d = h.Device();
  void* a = upload(h.a);
  void* bb = upload(h.b);
  void* c = upload(h.out);
  void* bias = h.c.bias ? upload(h.bias) : nullptr;
  d.gemm.a = a;
  d.gemm.b = bb;
  d.gemm.c = c;
  d.gemm.bias = bias;
  absl::Status st = b->Gemm(d, stream);
  EXPECT_TRUE(st.ok()) << gc.Name() << ": " << st;
  std::vector<char> got(h.out.size());
  EXPECT_TRUE(
      b->Copy(got.data(), c, got.size(), CopyKind::kDeviceToHost, stream).ok());
  EXPECT_TRUE(b->SynchronizeStream(stream).ok());
  for (void* p : {a, bb, c, bias}) {
    if (p != nullptr) {
      EXPECT_TRUE(b->DeviceFree(p).ok());
    }
  }
  if (st.ok())
    ExpectClose(gc, h.args, got, want, h.Scale(before), DeviceTolerance(gc));
}

TEST_F(GpuTest, GemmMatchesCpuGemm) {
  uint32_t seed = 100;
  struct Variant {
    DType dtype;
    bool tf32;
  };
  for (Variant v : {Variant{DType::kF32, false}, Variant{DType::kF32, true},
                    Variant{DType::kF16, false}, Variant{DType::kBF16, false},
                    Variant{DType::kF64, false}}) {
    for (GemmCase gc : AllCases(v.dtype, 33, 47, 65)) {
      gc.allow_tf32 = v.tf32;
      RunOnDevice(b_, gc, ++seed);
      if (HasFatalFailure()) return;
    }
    // One shape big enough for tensor-core tiles.
    GemmCase big;
    big.dtype = v.dtype;
    big.allow_tf32 = v.tf32;
    big.m = 256;
    big.n = 512;
    big.k = 384;
    big.bias = true;
    big.activation = GemmActivation::kGelu;
    RunOnDevice(b_, big, ++seed);
  }
  // An empty product: bias and activation alone, in the epilogue kernel.
  GemmCase empty;
  empty.k = 0;
  empty.bias = true;
  empty.activation = GemmActivation::kRelu;
  empty.accumulate = true;
  RunOnDevice(b_, empty, ++seed);
}

TEST_F(GpuTest, GemmIsCapturedIntoAGraph) {
  // A fresh backend: cuBLASLt, its workspace and the GELU kernel are all set
  // up during the capture.
  absl::StatusOr<std::unique_ptr<Backend>> fresh = MakeDriverBackend();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  Backend* b = fresh->get();
  absl::StatusOr<Stream> s = b->CreateStream();
  ASSERT_TRUE(s.ok()) << s.status();
  GemmCase gc;
  gc.m = 64;
  gc.n = 96;
  gc.k = 32;
  gc.bias = true;
  gc.activation = GemmActivation::kGelu;
  HostGemm h(gc, 5);
  std::vector<char> want = h.out;
  cpu::GemmArgs cpu_args = h.args;
  cpu_args.c = want.data();
  ASSERT_TRUE(cpu::Gemm(cpu_args).ok());
  std::vector<void*> dev;
  for (const std::vector<char>* v : {&h.a, &h.b, &h.out, &h.bias}) {
    absl::StatusOr<void*> p = b->DeviceAlloc(v->size());
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(
        b->Copy(*p, v->data(), v->size(), CopyKind::kHostToDevice, 0).ok());
    dev.push_back(*p);
  }
  DeviceGemmArgs d = h.Device();
  d.gemm.a = dev[0];
  d.gemm.b = dev[1];
  d.gemm.c = dev[2];
  d.gemm.bias = dev[3];
  ASSERT_TRUE(b->BeginCapture(*s).ok());
  const absl::Status st = b->Gemm(d, *s);
  absl::StatusOr<GraphHandle> g = b->EndCapture(*s);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(g.ok()) << g.status();
  // The graph outlives the stream it was captured on (and its workspace).
  ASSERT_TRUE(b->DestroyStream(*s).ok());
  ASSERT_TRUE(b->LaunchGraph(*g, 0).ok());
  std::vector<char> got(h.out.size());
  ASSERT_TRUE(
      b->Copy(got.data(), dev[2], got.size(), CopyKind::kDeviceToHost, 0).ok());
  ASSERT_TRUE(b->SynchronizeStream(0).ok());
  std::vector<char> before = h.out;
  ExpectClose(gc, h.args, got, want, h.Scale(before), DeviceTolerance(gc));
  b->DestroyGraph(*g);
  for (void* p : dev) EXPECT_TRUE(b->DeviceFree(p).ok());
}

}  // namespace
}  // namespace stepjit::runtime::cuda
