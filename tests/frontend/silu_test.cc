// silu (x * sigmoid(x)), an op added as one table row, one scalar
// definition and one gradient rule: eager against a float64 reference, its
// gradient against finite differences, the CUDA C the emitter spells from
// the scalar definition, and a compiled step (silu fused in a region)
// against the eager step.
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/cuda/cuda_math.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "ir/scalar_def.h"
#include "tests/util/train_step.h"

namespace stepjit {
namespace {

double RefSilu(double x) { return x / (1.0 + std::exp(-x)); }

std::vector<double> F64Values(const Tensor& t) {
  return t.contiguous().to(DType::kF64).to_vector<double>();
}

// Relative to max(1, |want|): the rounding of each dtype, with room for
// exp's last bits (f32, f64) and one rounding of the result (f16, bf16).
double TolFor(DType dt) {
  switch (dt) {
    case DType::kF64:
      return 1e-14;
    case DType::kF32:
      return 1e-6;
    case DType::kF16:
      return 1e-3;
    default:
      return 8e-3;  // bf16
  }
}

TEST(SiluTest, EagerMatchesTheFloat64Reference) {
  Generator gen(5);
  const Tensor base = (rand({7, 33}, {}, &gen) * 20.0 - 10.0).to(DType::kF64);
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    const Tensor x = base.to(dt);
    for (const Tensor& in : {x, x.t(), x.slice(1, 1, 33, 4)}) {
      const Tensor y = silu(in);
      ASSERT_EQ(y.dtype(), dt);
      ASSERT_EQ(y.shape(), in.shape());
      const std::vector<double> xs = F64Values(in), ys = F64Values(y);
      for (size_t i = 0; i < xs.size(); ++i) {
        const double want = RefSilu(xs[i]);
        EXPECT_LE(std::abs(ys[i] - want),
                  TolFor(dt) * std::max(1.0, std::abs(want)))
            << ir::DTypeName(dt) << " silu(" << xs[i] << ")";
      }
    }
  }
  // The table marks silu kFloatResult: integer inputs give f32.
  const Tensor ints = arange(-3, 4, 1, {.dtype = DType::kI64});
  const Tensor y = nn::functional::silu(ints);
  EXPECT_EQ(y.dtype(), DType::kF32);
  const std::vector<double> ys = F64Values(y);
  for (int i = 0; i < 7; ++i) {
    EXPECT_NEAR(ys[i], RefSilu(i - 3.0), 1e-6) << i - 3;
  }
  // Large |x|: exp(-x) overflows nothing in f64 up to 700; the result
  // tends to 0 from below and to x.
  const std::vector<double> big =
      F64Values(silu(from_vector(std::vector<double>{-700.0, 700.0}, {2})));
  EXPECT_NEAR(big[0], RefSilu(-700.0), 1e-310);
  EXPECT_EQ(big[1], 700.0);
}

TEST(SiluTest, GradientMatchesFiniteDifferences) {
  Generator gen(11);
  const Tensor x0 = (rand({3, 5}, {}, &gen) * 8.0 - 4.0).to(DType::kF64);
  Tensor x = x0.clone();
  x.set_requires_grad(true);
  Tensor w = (rand({3, 5}, {}, &gen) + 0.5).to(DType::kF64);
  sum(silu(x) * w).backward();
  const std::vector<double> grad = F64Values(x.grad());
  const std::vector<double> xs = F64Values(x0), ws = F64Values(w);
  const double h = 1e-6;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double fd = (RefSilu(xs[i] + h) - RefSilu(xs[i] - h)) / (2 * h);
    EXPECT_NEAR(grad[i], ws[i] * fd, 1e-8) << "x = " << xs[i];
  }
  // Through a transposed view too.
  Tensor xt = x0.clone();
  xt.set_requires_grad(true);
  sum(silu(xt.t()) * w.t()).backward();
  const std::vector<double> grad_t = F64Values(xt.grad());
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_EQ(grad_t[i], grad[i]);
}

// The CUDA emitter spells silu from its scalar definition (no per-op code):
// the same expression the CPU kernels evaluate. Kernels built from it run in
// the emulator in tests/codegen/cuda_emulation_test.cc (EmulatedSingleOps
// covers every elementwise op of the table).
TEST(SiluTest, CudaEmitterSpellsTheScalarDefinition) {
  codegen::cuda::CudaStatements s;
  codegen::cuda::CudaMath f{s, false}, d{s, true};
  EXPECT_EQ(ir::ScalarDef<ir::OpId::kSilu>::Apply(f, "x"),
            "(x * (1.0f / (1.0f + expf((-x)))))");
  EXPECT_EQ(ir::ScalarDef<ir::OpId::kSilu>::Apply(d, "x"),
            "(x * (1.0 / (1.0 + exp((-x)))))");
}

struct SiluMlp {
  nn::Linear fc1{16, 32};
  nn::Linear fc2{32, 4};
  std::vector<Tensor> parameters() {
    std::vector<Tensor> p = fc1.parameters();
    for (const Tensor& t : fc2.parameters()) p.push_back(t);
    return p;
  }
};

// Losses, parameters and grads of `steps` SGD steps, compiled or eager.
std::vector<std::vector<double>> Train(bool compiled, int steps,
                                       std::string* ir = nullptr,
                                       CompileStats* stats = nullptr) {
  manual_seed(3);
  SiluMlp model;
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  auto step = test::OptimizerStep(opt, [&](const Tensor& x, const Tensor& y) {
    return mse_loss(model.fc2(silu(model.fc1(x))), y);
  });
  auto fast =
      compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager});
  Generator gen(4);
  std::vector<std::vector<double>> out;
  for (int i = 0; i < steps; ++i) {
    const Tensor x = randn({8, 16}, {}, &gen), y = randn({8, 4}, {}, &gen);
    out.push_back(F64Values(fast(x, y)));
  }
  for (const Tensor& p : model.parameters()) {
    out.push_back(F64Values(p));
    out.push_back(F64Values(p.grad()));
  }
  if (ir != nullptr) {
    std::ostringstream os;
    fast.dump_ir(os);
    *ir = os.str();
  }
  if (stats != nullptr) *stats = fast.stats();
  return out;
}

TEST(SiluTest, CompiledStepEqualsTheEagerStep) {
  std::string ir;
  CompileStats stats;
  const auto compiled = Train(true, 5, &ir, &stats);
  const auto eager = Train(false, 5);
  ASSERT_EQ(compiled.size(), eager.size());
  // The generated kernels evaluate the same scalar definitions in the same
  // precision as the eager kernels: bit for bit.
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_EQ(compiled[i], eager[i]) << "output " << i;
  }
  EXPECT_GT(stats.replays, 0) << ir;
  EXPECT_GT(stats.native_regions, 0) << ir;
  // silu and its gradient run inside fusion regions, not as kernels of
  // their own.
  std::istringstream lines(ir);
  bool fused = false;
  int depth = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("fusion @") != std::string::npos) ++depth;
    if (depth > 0 && line.find("= silu ") != std::string::npos) fused = true;
    if (depth > 0 && line.find('}') != std::string::npos &&
        line.find('{') == std::string::npos) {
      --depth;
    }
  }
  EXPECT_TRUE(fused) << ir;
}

}  // namespace
}  // namespace stepjit
