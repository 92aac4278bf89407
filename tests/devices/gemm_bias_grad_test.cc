// Checks the bias gradient a GEMM call writes (GemmArgs::bias_grad) against
// a float64 loop, and the 2-result matmul (ir/ops.def) run eagerly through
// DispatchResults and by a compiled CPU program against matmul and sum.
//
// Tolerances, |got - want| <= rtol * S with S = sum_l |op(A)[i, l]|: the CPU
// accumulates in double and rounds once, so
//   f32 rtol 1e-6 (one rounding, 2^-24), f64 1e-12, f16/bf16 1e-2 (2^-8).
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
#include "ir/dtype.h"
#include "ir/parser.h"
#include "ir/status.h"
#include "ir/verifier.h"
#include "program/executor.h"
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
using test::LoadElement;
using test::StoreElement;
using ::testing::HasSubstr;

double Rtol(DType t) {
  switch (t) {
    case DType::kF32:
      return 1e-6;
    case DType::kF64:
      return 1e-12;
    default:
      return 1e-2;
  }
}

constexpr double kSentinel = 1000;  // exact in every float dtype

// Random operands with padded pitches; bias_grad has two sentinel elements
// past its m.
struct Operands {
  DType dtype;
  std::vector<char> a, b, c, grad;
  GemmArgs args;

  Operands(DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
           uint32_t seed)
      : dtype(t) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(-2.0, 2.0);
    const int64_t es = ir::DTypeSize(t);
    args.dtype = t;
    args.trans_a = ta;
    args.trans_b = tb;
    args.m = m;
    args.n = n;
    args.k = k;
    args.lda = (ta ? m : k) + 3;
    args.ldb = (tb ? k : n) + 1;
    args.ldc = std::max<int64_t>(n, 1) + 2;
    auto fill = [&](std::vector<char>& v, int64_t count) {
      v.assign(static_cast<size_t>(std::max<int64_t>(count, 1) * es), 0);
      for (int64_t i = 0; i < count; ++i)
        StoreElement(v.data(), t, i, dist(gen));
    };
    fill(a, (ta ? k : m) * args.lda);
    fill(b, (tb ? n : k) * args.ldb);
    fill(c, m * args.ldc);
    grad.assign(static_cast<size_t>((m + 2) * es), 0);
    for (int64_t i = 0; i < m + 2; ++i)
      StoreElement(grad.data(), t, i, kSentinel);
    args.a = a.data();
    args.b = b.data();
    args.c = c.data();
    args.bias_grad = grad.data();
  }

  double A(int64_t i, int64_t l) const {
    return LoadElement(a.data(), dtype,
                       args.trans_a ? l * args.lda + i : i * args.lda + l);
  }
  // Checks bias_grad against f64 row sums of the stored op(A), and that the
  // sentinels past it are untouched.
  void ExpectBiasGrad(const std::string& what) const {
    for (int64_t i = 0; i < args.m; ++i) {
      double want = 0, scale = 0;
      for (int64_t l = 0; l < args.k; ++l) {
        want += A(i, l);
        scale += std::abs(A(i, l));
      }
      EXPECT_NEAR(LoadElement(grad.data(), dtype, i), want, Rtol(dtype) * scale)
          << what << " row " << i;
    }
    for (int64_t i = args.m; i < args.m + 2; ++i) {
      EXPECT_EQ(LoadElement(grad.data(), dtype, i), kSentinel)
          << what << " past the end";
    }
  }
};

TEST(GemmBiasGradTest, MatchesFloat64RowSumsAndLeavesCAsWithout) {
  uint32_t seed = 1;
  for (DType t : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    for (GemmBackend backend : {GemmBackend::kOpenBlas, GemmBackend::kOneDnn}) {
      if (t == DType::kF64 && backend == GemmBackend::kOneDnn) continue;
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          for (bool epilogue : {false, true}) {
            Operands o(t, ta, tb, 9, 6, 13, ++seed);
            o.args.backend = backend;
            std::vector<char> bias(o.c.size());
            if (epilogue) {
              for (int64_t j = 0; j < o.args.n; ++j)
                StoreElement(bias.data(), t, j, 0.25 * j);
              o.args.bias = bias.data();
              o.args.activation = GemmActivation(ir::OpId::kRelu);
              o.args.accumulate = true;
            }
            std::vector<char> plain_c = o.c;
            GemmArgs plain = o.args;
            plain.bias_grad = nullptr;
            plain.c = plain_c.data();
            const std::string what =
                absl::StrCat(ir::DTypeName(t), " ", GemmBackendName(backend),
                             " ", ta ? "T" : "N", tb ? "T" : "N",
                             epilogue ? " +bias,relu,+=C" : "");
            ASSERT_TRUE(Gemm(o.args).ok()) << what;
            ASSERT_TRUE(Gemm(plain).ok()) << what;
            o.ExpectBiasGrad(what);
            EXPECT_EQ(o.c, plain_c)
                << what << ": C differs from the call without it";
          }
        }
      }
    }
  }
}

TEST(GemmBiasGradTest, EmptyDimensions) {
  // k == 0: zeros. n == 0: C is empty but A is not.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{5, 0}, {0, 7}}) {
    Operands o(DType::kF32, true, false, 4, n, k, 3);
    ASSERT_TRUE(Gemm(o.args).ok());
    o.ExpectBiasGrad(absl::StrCat("n=", n, " k=", k));
  }
  Operands empty(DType::kBF16, false, false, 0, 5, 3, 4);
  ASSERT_TRUE(Gemm(empty.args).ok());
  empty.ExpectBiasGrad("m=0");
}

TEST(GemmBiasGradTest, RefusesABatchAndANullA) {
  Operands o(DType::kF32, false, false, 4, 3, 5, 5);
  GemmArgs batched = o.args;
  batched.batch = 2;
  batched.stride_a = batched.stride_b = 0;
  batched.stride_c = 4 * batched.ldc;
  absl::Status st = Gemm(batched);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(st.message(),
              HasSubstr("expected batch = 1 with bias_grad (the bias gradient "
                        "of one product), got batch=2"));
  GemmArgs no_a = o.args;
  no_a.a = nullptr;
  st = Gemm(no_a);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("expected a non-null pointer for A"));
}

// ---- The 2-result matmul op ------------------------------------------------

ir::Attrs BgradAttrs(bool ta) {
  return ir::Attrs{{AttrKey::kTransposeA, ta},
                   {AttrKey::kTransposeB, false},
                   {AttrKey::kEpilogue, std::string("bgrad")}};
}

using test::ExpectError;

TEST(MatmulBiasGradOpTest, MatchesMatmulAndSum) {
  Generator gen(7);
  for (bool ta : {true, false}) {
    // dy is [batch 32, out 12] (transposed A) or [out 12, batch 32].
    const Tensor dy = randn(ta ? Shape{32, 12} : Shape{12, 32}, {}, &gen);
    const Tensor x = randn({32, 10}, {}, &gen);
    const std::vector<Tensor> got =
        DispatchResults(OpId::kMatmul, {dy, x}, BgradAttrs(ta), 2);
    ASSERT_EQ(got.size(), 2u);
    const Tensor product = Dispatch(OpId::kMatmul, {dy, x}, BgradAttrs(ta));
    EXPECT_EQ(got[0].to_vector<float>(), product.to_vector<float>());
    const std::vector<float> want =
        sum(dy, {ta ? 0 : 1}, false).to_vector<float>();
    const std::vector<float> grad = got[1].to_vector<float>();
    ASSERT_EQ(grad.size(), 12u);
    for (size_t i = 0; i < grad.size(); ++i) {
      EXPECT_NEAR(grad[i], want[i], 1e-6 * 32 * 4)
          << "transpose_a=" << ta << " " << i;
    }
  }
}

TEST(MatmulBiasGradOpTest, BadUsesAreNamed) {
  const Tensor dy = ones({8, 4}), x = ones({8, 3});
  ir::Attrs no_mark{{AttrKey::kTransposeA, true}};
  ExpectError(
      [&] {
        DispatchResults(OpId::kMatmul, {dy, x}, no_mark, 2);
      },
      {"a second result (the bias gradient) needs 2 operands and "
       "epilogue = \"bgrad\", got 2 operands and epilogue ''"});
  ExpectError(
      [&] {
        DispatchResults(OpId::kMatmul, {ones({2, 8, 4}), ones({2, 8, 3})},
                        BgradAttrs(true), 2);
      },
      {"a bias gradient needs 2-D operands", "got ranks 3 and 3"});
  ExpectError(
      [&] {
        DispatchResults(OpId::kAdd, {dy, dy}, {}, 2);
      },
      {"add(f32[8, 4], f32[8, 4]): expects 1 result, got 2"});
  Tensor w = ones({8, 3});
  w.set_requires_grad(true);
  ExpectError(
      [&] {
        DispatchResults(OpId::kMatmul, {dy, w}, BgradAttrs(true), 2);
      },
      {"matmul with a bias-gradient result (epilogue = \"bgrad\") has no "
       "gradient, but input 1 requires grad"});
  NoGradGuard no_grad;
  EXPECT_EQ(DispatchResults(OpId::kMatmul, {dy, w}, BgradAttrs(true), 2)[1]
                .to_vector<float>(),
            std::vector<float>(4, 8.0f));
}

// The IR gemm-bgrad leaves (tests/ir/gemm_bgrad.ir's relu layer) against the
// IR before it, both as compiled CPU programs.
constexpr const char* kUnabsorbed = R"(
graph @relu_layer(%mask: bool[16,32] input, %g: f32[16,32] input, %x: f32[16,20] input, %m1: f32[32] state) {
  %0 = fusion @fused_0(%mask, %g, %m1) : (f32[16,32], f32[32], f32[32]) {
    graph @fused_0(%p0: bool[16,32] input, %p1: f32[16,32] input, %p2: f32[32] input) {
      %0 = full {shape = [], value = 0.0, dtype = f32} : f32[]
      %1 = where %p0, %p1, %0 : f32[16,32]
      %2 = sum %1 {dims = [0], keepdim = true} : f32[1,32]
      %3 = reshape %2 {shape = [32]} : f32[32]
      %4 = full {shape = [], value = 0.1, dtype = f32} : f32[]
      %5 = lerp_ %p2, %3, %4 : f32[32]
      return %1, %3, %5
    }
  }
  %1 = matmul %0#0, %x {transpose_a = true, transpose_b = false, epilogue = "bgrad"} : f32[32,20]
  assign %m1, %0#2
  return %1, %0#1
}
)";
constexpr const char* kAbsorbed = R"(
graph @relu_layer(%mask: bool[16,32] input, %g: f32[16,32] input, %x: f32[16,20] input, %m1: f32[32] state) {
  %0 = fusion @fused_0(%mask, %g) : (f32[16,32]) {
    graph @fused_0(%p0: bool[16,32] input, %p1: f32[16,32] input) {
      %0 = full {shape = [], value = 0.0, dtype = f32} : f32[]
      %1 = where %p0, %p1, %0 : f32[16,32]
      return %1
    }
  }
  %1 = matmul %0#0, %x {transpose_a = true, transpose_b = false, epilogue = "bgrad"} : (f32[32,20], f32[32])
  %2 = fusion @fused_0_post(%1#1, %m1) : (f32[32]) {
    graph @fused_0_post(%p0: f32[32] input, %p1: f32[32] input) {
      %0 = full {shape = [], value = 0.1, dtype = f32} : f32[]
      %1 = lerp_ %p1, %p0, %0 : f32[32]
      return %1
    }
  }
  assign %m1, %2#0
  return %1#0, %1#1
}
)";

TEST(MatmulBiasGradOpTest, CompiledCpuProgramMatchesTheUnabsorbedGraph) {
  Generator gen(9);
  const Tensor mask = gt(randn({16, 32}, {}, &gen), scalar_tensor(0.0));
  const Tensor g = randn({16, 32}, {}, &gen);
  const Tensor x = randn({16, 20}, {}, &gen);
  const Tensor m_init = randn({32}, {}, &gen);
  std::vector<std::vector<float>> results[2];
  std::vector<float> state[2];
  const char* texts[] = {kUnabsorbed, kAbsorbed};
  for (int i = 0; i < 2; ++i) {
    auto graph = ir::ParseGraph(texts[i]);
    ASSERT_TRUE(graph.ok()) << graph.status();
    ASSERT_TRUE(ir::Verify(**graph).ok()) << ir::Verify(**graph);
    auto program = Program::Build(**graph);
    ASSERT_TRUE(program.ok()) << program.status();
    Tensor m = m_init.clone();
    for (const Tensor& r : program->Run({mask, g, x}, {m})) {
      results[i].push_back(r.to_vector<float>());
    }
    state[i] = m.to_vector<float>();
  }
  ASSERT_EQ(results[0].size(), 2u);
  ASSERT_EQ(results[1].size(), 2u);
  EXPECT_EQ(results[1][0], results[0][0]);  // the product: the same GEMM
  for (int r = 1; r < 2; ++r) {
    for (size_t j = 0; j < results[0][r].size(); ++j) {
      EXPECT_NEAR(results[1][r][j], results[0][r][j], 1e-5)
          << "bias grad " << j;
    }
  }
  for (size_t j = 0; j < state[0].size(); ++j) {
    EXPECT_NEAR(state[1][j], state[0][j], 1e-6) << "updated state " << j;
  }
}

}  // namespace
}  // namespace stepjit::runtime::cpu
