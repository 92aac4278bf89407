// Checks GEMM epilogues (bias + relu/gelu/gelu_tanh, in devices/cpu/gemm and
// the 3-operand matmul op) against float64 loops, on both backends.
//
// Tolerances, |got - want| <= rtol * S * slope + atol * (1 + |want|), where S
// is the abs-sum of the terms before the activation (sum_k |a_ik b_kj| +
// |bias_j| (+ |c_ij| when accumulating)) and slope 1.2 bounds |act'| (gelu's
// largest slope is 1.13; relu's 1):
//   f32       rtol 1e-5 (accumulation order); atol 1e-7 with OpenBLAS, whose
//             epilogue is the scalar definition evaluated in f32 (measured
//             8.3e-8 for gelu, 7.8e-8 for gelu_tanh on |x| <= 10, 0 for relu);
//             atol 1e-6 with oneDNN, whose gelu/gelu_tanh post-ops are its own
//             approximations (measured 2.6e-7 and 1.4e-7, 0 for relu).
//   f64       rtol 1e-12, atol 1e-14.
//   f16/bf16  rtol 1e-2 (one final rounding; f32 inside), atol 1e-2.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cpu/gemm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/attrs.h"
#include "ir/gemm_activation.h"
#include "ir/host_math.h"
#include "ir/scalar_def.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "tests/util/dtype_elements.h"
#include "tests/util/expect_error.h"

namespace stepjit::runtime::cpu {
namespace {

using ir::AttrKey;
using ir::DType;
using ir::OpId;
using ::testing::HasSubstr;

// None and every op the table marks kGemmActivation.
const std::vector<GemmActivation> kActivations = [] {
  std::vector<GemmActivation> acts = {GemmActivation()};
  for (int i = 0; i < ir::kNumOps; ++i) {
    const auto op = static_cast<OpId>(i);
    if (ir::IsGemmActivation(op)) acts.push_back(op);
  }
  return acts;
}();

// The scalar definition (ir/scalar_def.h) in double.
double Activate(GemmActivation act, double x) {
  if (!act.has_value()) return x;
  ir::HostMath<double> m;
  double y = NAN;
  ir::VisitGemmActivation(
      *act, [&]<ir::OpId op>() { y = ir::ScalarDef<op>::Apply(m, x); });
  return y;
}

struct Tol {
  double rtol, atol;
};
Tol TolFor(DType t, GemmBackend backend) {
  switch (t) {
    case DType::kF32:
      return {1e-5, backend == GemmBackend::kOneDnn ? 1e-6 : 1e-7};
    case DType::kF64:
      return {1e-12, 1e-14};
    default:
      return {1e-2, 1e-2};
  }
}

using Matrix = test::DTypeBuffer;

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  bool accumulate = false;
  int64_t batch = 1;
  double scale =
      1.0;  // spread of the inputs: pre-activations reach ~scale*sqrt(k)
};

// Runs one product with a bias and `act`, padded pitches, and checks every
// element of C against the f64 reference and the padding for writes.
void RunCase(DType dtype, GemmBackend backend, GemmActivation act,
             const Case& c, double* worst = nullptr) {
  SCOPED_TRACE(absl::StrCat(ir::DTypeName(dtype), " ", GemmBackendName(backend),
                            " ", GemmActivationName(act),
                            c.trans_a ? " T" : " N", c.trans_b ? "T" : "N",
                            " m=", c.m, " n=", c.n, " k=", c.k,
                            " acc=", c.accumulate, " batch=", c.batch));
  const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  const int64_t lda = a_cols + 1, ldb = b_cols + 2, ldc = c.n + 3;
  const int64_t sa = a_rows * lda, sb = b_rows * ldb, sc = c.m * ldc + 1;
  Matrix a(dtype, c.batch * sa), b(dtype, c.batch * sb),
      out(dtype, c.batch * sc), bias(dtype, c.n);
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> dist(-c.scale, c.scale);
  for (int64_t i = 0; i < c.batch * sa; ++i) a.Set(i, dist(rng));
  for (int64_t i = 0; i < c.batch * sb; ++i) b.Set(i, dist(rng));
  for (int64_t i = 0; i < c.n; ++i) bias.Set(i, 4 * dist(rng));
  for (int64_t i = 0; i < c.batch * sc; ++i) out.Set(i, dist(rng));
  const Matrix before = out;
  GemmArgs g{.dtype = dtype,
             .trans_a = c.trans_a,
             .trans_b = c.trans_b,
             .m = c.m,
             .n = c.n,
             .k = c.k,
             .a = a.data(),
             .lda = lda,
             .b = b.data(),
             .ldb = ldb,
             .c = out.data(),
             .ldc = ldc,
             .accumulate = c.accumulate,
             .bias = bias.data(),
             .activation = act,
             .batch = c.batch,
             .stride_a = sa,
             .stride_b = sb,
             .stride_c = sc,
             .backend = backend};
  const absl::Status st = Gemm(g);
  ASSERT_TRUE(st.ok()) << st;
  const Tol tol = TolFor(dtype, backend);
  std::vector<bool> written(c.batch * sc, false);
  for (int64_t p = 0; p < c.batch; ++p) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        const int64_t at = p * sc + i * ldc + j;
        written[at] = true;
        const test::ProductElement x = test::RefProductElement(
            g, p, i, j, bias.Get(j) + (c.accumulate ? before.Get(at) : 0.0));
        const double want = Activate(act, x.value);
        const double err = std::abs(out.Get(at) - want);
        if (worst) *worst = std::max(*worst, err);
        ASSERT_LE(
            err, tol.rtol * x.magnitude * 1.2 + tol.atol * (1 + std::abs(want)))
            << "C[" << p << "," << i << "," << j << "] = " << out.Get(at)
            << ", want " << want << " (pre-activation " << x.value << ")";
      }
    }
  }
  for (int64_t i = 0; i < c.batch * sc; ++i) {
    if (!written[i]) {
      ASSERT_EQ(out.Get(i), before.Get(i)) << "padding " << i;
    }
  }
}

TEST(GemmEpilogueTest, F32BothBackendsEveryActivation) {
  for (GemmBackend backend : {GemmBackend::kOpenBlas, GemmBackend::kOneDnn}) {
    for (GemmActivation act : kActivations) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          RunCase(DType::kF32, backend, act, {ta, tb, 7, 13, 5});
          RunCase(DType::kF32, backend, act, {ta, tb, 33, 17, 70, true});
        }
      }
      RunCase(DType::kF32, backend, act, {false, true, 5, 6, 7, false, 3});
      RunCase(DType::kF32, backend, act, {false, false, 4, 9, 3, true, 2});
    }
  }
}

// Above 2^17 multiply-adds kAuto takes oneDNN, below it OpenBLAS.
TEST(GemmEpilogueTest, F32AutoOnBothSidesOfTheThreshold) {
  const Case big{false, true, 128, 96, 64, false, 1, 3.0};
  const Case small{false, true, 16, 32, 24, false, 1, 3.0};
  ASSERT_EQ(ChooseBackend({.dtype = DType::kF32, .m = 128, .n = 96, .k = 64}),
            GemmBackend::kOneDnn);
  ASSERT_EQ(ChooseBackend({.dtype = DType::kF32, .m = 16, .n = 32, .k = 24}),
            GemmBackend::kOpenBlas);
  for (GemmActivation act : kActivations) {
    RunCase(DType::kF32, GemmBackend::kAuto, act, big);
    RunCase(DType::kF32, GemmBackend::kAuto, act, small);
  }
}

// The activation alone: C = act(x * 1 + 0) for x on a fine grid of
// [-10, 10], where the product and bias add are exact, against the scalar
// definition in f64. This is what atol above covers.
TEST(GemmEpilogueTest, ActivationErrorAloneOnBothBackends) {
  const int64_t m = 8001;
  std::vector<float> x(m), one = {1.0f}, zero = {0.0f}, c(m);
  for (int64_t i = 0; i < m; ++i)
    x[i] = static_cast<float>(-10 + 20.0 * i / (m - 1));
  for (GemmBackend backend : {GemmBackend::kOpenBlas, GemmBackend::kOneDnn}) {
    for (GemmActivation act : kActivations) {
      GemmArgs g{.dtype = DType::kF32,
                 .m = m,
                 .n = 1,
                 .k = 1,
                 .a = x.data(),
                 .lda = 1,
                 .b = one.data(),
                 .ldb = 1,
                 .c = c.data(),
                 .ldc = 1,
                 .bias = zero.data(),
                 .activation = act,
                 .backend = backend};
      ASSERT_TRUE(Gemm(g).ok());
      double worst = 0;
      for (int64_t i = 0; i < m; ++i) {
        const double want = Activate(act, x[i]);
        worst = std::max(worst, std::abs(c[i] - want) / (1 + std::abs(want)));
      }
      // silu is x * sigmoid(x): exp, a division and a product, each rounded
      // in f32, so up to 3 ulp where the others round once or twice.
      const double tol =
          act == OpId::kSilu ? 3 * 0x1p-23 : TolFor(DType::kF32, backend).atol;
      EXPECT_LE(worst, tol)
          << GemmBackendName(backend) << " " << GemmActivationName(act);
    }
  }
}

TEST(GemmEpilogueTest, F64AndLowPrecision) {
  for (GemmActivation act : kActivations) {
    RunCase(DType::kF64, GemmBackend::kOpenBlas, act,
            {true, false, 9, 11, 13, true});
    for (DType t : {DType::kF16, DType::kBF16}) {
      for (GemmBackend backend :
           {GemmBackend::kOpenBlas, GemmBackend::kOneDnn}) {
        RunCase(t, backend, act, {false, true, 9, 11, 13});
      }
    }
  }
}

// The unfused eager path (product, then add, then relu, each rounded to f32)
// and the OpenBLAS epilogue do the same float operations, bit for bit; this
// is what keeps small compiled MLPs bit-identical to eager.
TEST(GemmEpilogueTest, OpenBlasEpilogueIsBitIdenticalToSeparateAddAndRelu) {
  const int64_t m = 6, n = 10, k = 12;
  std::vector<float> a(m * k), b(k * n), bias(n), fused(m * n), plain(m * n);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  for (float& v : bias) v = dist(rng);
  GemmArgs g{.dtype = DType::kF32,
             .m = m,
             .n = n,
             .k = k,
             .a = a.data(),
             .lda = k,
             .b = b.data(),
             .ldb = n,
             .c = plain.data(),
             .ldc = n,
             .backend = GemmBackend::kOpenBlas};
  ASSERT_TRUE(Gemm(g).ok());
  g.c = fused.data();
  g.bias = bias.data();
  g.activation = GemmActivation(ir::OpId::kRelu);
  ASSERT_TRUE(Gemm(g).ok());
  for (int64_t i = 0; i < m * n; ++i) {
    const float want = std::max(plain[i] + bias[i % n], 0.0f);
    ASSERT_EQ(fused[i], want) << i;
  }
}

TEST(GemmEpilogueTest, EmptyReductionLeavesTheActivatedBias) {
  for (GemmBackend backend : {GemmBackend::kOpenBlas, GemmBackend::kOneDnn}) {
    float bias[3] = {-1, 0.5, 2}, c[6] = {1, 1, 1, -5, -5, -5};
    GemmArgs g{.dtype = DType::kF32,
               .m = 2,
               .n = 3,
               .k = 0,
               .lda = 1,
               .ldb = 3,
               .c = c,
               .ldc = 3,
               .accumulate = true,
               .bias = bias,
               .activation = GemmActivation(ir::OpId::kRelu),
               .backend = backend};
    ASSERT_TRUE(Gemm(g).ok());
    EXPECT_THAT(std::vector<float>(c, c + 6),
                ::testing::ElementsAre(0, 1.5, 3, 0, 0, 0));
    g.accumulate = false;
    ASSERT_TRUE(Gemm(g).ok());
    EXPECT_THAT(std::vector<float>(c, c + 6),
                ::testing::ElementsAre(0, 0.5, 2, 0, 0.5, 2));
  }
}

// ---- The 3-operand matmul op through Dispatch. ----

Tensor MatmulBias(const Tensor& a, const Tensor& b, const Tensor& bias,
                  const std::string& epilogue, bool tb = true) {
  ir::Attrs attrs;
  attrs.Set(AttrKey::kTransposeA, false);
  attrs.Set(AttrKey::kTransposeB, tb);
  if (!epilogue.empty()) attrs.Set(AttrKey::kEpilogue, epilogue);
  return Dispatch(OpId::kMatmul, {a, b, bias}, attrs);
}

using test::ExpectError;

// Against the unfused ops (matmul, add, activation) with the tolerance above;
// batch 128 x 512 x 784 runs on oneDNN, 7 x 5 x 13 on OpenBLAS.
TEST(MatmulBiasOpTest, MatchesTheUnfusedOps) {
  Generator gen(3);
  struct Shape3 {
    std::vector<int64_t> a;
    int64_t n, k;
  };
  for (const Shape3& s : {Shape3{{128, 784}, 512, 784}, Shape3{{7, 13}, 5, 13},
                          Shape3{{3, 7, 13}, 5, 13}}) {
    const Tensor a = randn(s.a, {}, &gen), w = randn({s.n, s.k}, {}, &gen),
                 bias = randn({s.n}, {}, &gen);
    const Tensor plain = matmul(a, w, false, true) + bias;
    const std::vector<float> sum =
        (matmul(abs(a), abs(w), false, true) + abs(bias))
            .contiguous()
            .to_vector<float>();
    for (const std::string act : {"", "relu", "gelu", "gelu_tanh"}) {
      SCOPED_TRACE(absl::StrCat(ir::ShapeToString(a.shape()), " ", act));
      const Tensor want = act.empty()     ? plain
                          : act == "relu" ? relu(plain)
                          : act == "gelu" ? gelu(plain)
                                          : gelu(plain, "tanh");
      const Tensor got = MatmulBias(
          a, w, bias, absl::StrCat("bias", act.empty() ? "" : ",", act));
      ASSERT_EQ(got.shape(), want.shape());
      const std::vector<float> g = got.to_vector<float>(),
                               e = want.to_vector<float>();
      for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_NEAR(g[i], e[i],
                    1e-5 * sum[i] * 1.2 + 1e-6 * (1 + std::abs(e[i])))
            << i;
      }
    }
  }
}

TEST(MatmulBiasOpTest, F64RunsOnOpenBlas) {
  const Tensor a = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  const Tensor w = from_vector(std::vector<double>{1, 0, 0, 1}, {2, 2});
  const Tensor bias = from_vector(std::vector<double>{-2, 0.5}, {2});
  EXPECT_EQ(MatmulBias(a, w, bias, "bias,relu").to_vector<double>(),
            (std::vector<double>{0, 2.5, 1, 4.5}));
}

TEST(MatmulBiasOpTest, BadOperandsAreNamed) {
  const Tensor a = ones({4, 8}), w = ones({5, 8});
  ExpectError(
      [&] {
        MatmulBias(a, w, ones({1, 5}), "bias");
      },
      {"matmul(f32[4, 8], f32[5, 8], f32[1, 5])",
       "the bias must be 1-D [5], got rank 2"});
  ExpectError([&] { MatmulBias(a, w, ones({4}), "bias"); },
              {"the bias has 4 elements but the output's last dim is 5"});
  ExpectError(
      [&] { MatmulBias(a, w, ones({5}, {.dtype = DType::kF64}), "bias"); },
      {"the bias is f64 but the operands are f32"});
  ExpectError([&] { MatmulBias(a, w, ones({5}), "bias,tanh"); },
              {"unknown epilogue 'bias,tanh'"});
  ExpectError([&] { MatmulBias(a, w, ones({5}), ""); },
              {"a bias operand needs epilogue = "
               "\"bias[,relu|gelu|gelu_tanh|silu]\", got ''"});
  ExpectError([&] { MatmulBias(a, w, ones({5}), "bgrad"); }, {"got 'bgrad'"});
}

TEST(MatmulBiasOpTest, AskingForGradientsIsAnError) {
  Tensor w = ones({5, 8});
  w.set_requires_grad(true);
  ExpectError(
      [&] {
        MatmulBias(ones({4, 8}), w, ones({5}), "bias,relu");
      },
      {"matmul with a bias operand (epilogue = \"bias,relu\") has no gradient",
       "input 1 requires grad"});
  NoGradGuard no_grad;
  EXPECT_EQ(
      MatmulBias(ones({4, 8}), w, ones({5}), "bias,relu").to_vector<float>(),
      std::vector<float>(20, 9.0f));
}

}  // namespace
}  // namespace stepjit::runtime::cpu
