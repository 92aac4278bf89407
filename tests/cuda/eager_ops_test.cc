// Eager CUDA ops against the eager CPU path: every result is computed on both
// devices from the same inputs. Generated elementwise kernels use the CPU
// kernels' scalar definitions, so they must agree bit for bit; reductions
// sum in a different order (tolerance 1e-6 relative); GEMMs on a GPU use
// cuBLASLt (tolerances below). Runs on the host emulator unless
// STEPJIT_TEST_CUDA_BACKEND=driver.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "devices/cuda/api.h"
#include "devices/cuda/memory/pinned_pool.h"
#include "devices/cuda/ops.h"
#include "gtest/gtest.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "tests/cuda/cuda_test_backend.h"
#include "training/nn/layers.h"
#include "training/optim/adamw.h"

namespace stepjit {
namespace {

using test::CudaTest;
using test::Values;

const Device kCuda = Device::cuda(0);

// Random values in [lo, hi) on the CPU, rounded to `dtype`.
Tensor Random(ShapeRef shape, DType dtype, double lo = -2, double hi = 2) {
  return (rand(shape) * (hi - lo) + lo).to(dtype);
}

void ExpectSame(const Tensor& cuda, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(cuda.device().is_cuda()) << what;
  ASSERT_EQ(cuda.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(cuda.shape(), cpu.shape()) << what;
  const std::vector<double> a = Values(cuda), b = Values(cpu);
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << what << " element " << i;
    } else {
      EXPECT_EQ(a[i], b[i]) << what << " element " << i;
    }
  }
}

void ExpectClose(const Tensor& cuda, const Tensor& cpu, double rel, double abs,
                 const std::string& what) {
  ASSERT_EQ(cuda.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(cuda.shape(), cpu.shape()) << what;
  const std::vector<double> a = Values(cuda), b = Values(cpu);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], abs + rel * std::abs(b[i])) << what << " element " << i;
  }
}

TEST_F(CudaTest, CopiesRoundTripEveryDTypeSyncAndPinnedAsync) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI64,
                   DType::kI32, DType::kBool}) {
    Tensor x = Random({5, 7}, DType::kF32, -50, 50).to(dt);
    Tensor d = x.to(kCuda);
    EXPECT_TRUE(d.device().is_cuda());
    ExpectSame(d, x, absl::StrCat("round trip ", ir::DTypeName(dt)));
    // Pinned source, asynchronous copy there and back.
    Tensor pinned = x.pin_memory();
    EXPECT_TRUE(pinned.is_pinned());
    Tensor back = pinned.to(kCuda, /*non_blocking=*/true).to(Device::cpu(), true);
    EXPECT_TRUE(back.is_pinned());
    ASSERT_TRUE(runtime::cuda::GetBackend()->SynchronizeStream(0).ok());
    EXPECT_EQ(Values(back), Values(x)) << ir::DTypeName(dt);
  }
  // A transposed view is copied in its logical order.
  Tensor x = Random({4, 6}, DType::kF32);
  ExpectSame(x.to(kCuda).t().contiguous(), x.t().contiguous(), "transpose");
  ExpectSame(x.t().to(kCuda), x.t().contiguous(), "transposed source");
}

TEST_F(CudaTest, UnaryOpsMatchTheCpuBitForBit) {
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> ops = {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(abs(x)); }},
      {"sqrt", [](const Tensor& x) { return sqrt(abs(x)); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(abs(x)); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
  };
  Tensor x = Random({3, 5}, DType::kF32);
  Tensor dx = x.to(kCuda);
  for (const auto& [name, fn] : ops) ExpectSame(fn(dx), fn(x), name);
}

TEST_F(CudaTest, BinaryOpsBroadcastAndPromoteLikeTheCpu) {
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&, const Tensor&)>>>
      ops = {
          {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
          {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
          {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
          {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
          {"pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a), b); }},
          {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
          {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
          {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
          {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }},
          {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
          {"where", [](const Tensor& a, const Tensor& b) { return where(gt(a, b), a, b); }},
      };
  Tensor a = Random({3, 5}, DType::kF32), b = Random({5}, DType::kF32);
  Tensor da = a.to(kCuda), db = b.to(kCuda);
  for (const auto& [name, fn] : ops) ExpectSame(fn(da, db), fn(a, b), name);
  // A CPU scalar joins a CUDA tensor (it is copied over), in both orders.
  ExpectSame(da * 3.0, a * 3.0, "tensor * scalar");
  ExpectSame(2.0 - da, 2.0 - a, "scalar - tensor");
  // Half types compute in f32 and round per op; f64 stays f64; mixed dtypes
  // promote.
  for (DType dt : {DType::kF16, DType::kBF16, DType::kF64}) {
    Tensor h = a.to(dt), g = b.to(dt);
    ExpectSame(h.to(kCuda) * g.to(kCuda) + g.to(kCuda), h * g + g, std::string(ir::DTypeName(dt)));
    ExpectSame(exp(h.to(kCuda)), exp(h), absl::StrCat("exp ", ir::DTypeName(dt)));
  }
  ExpectSame(a.to(DType::kBF16).to(kCuda) + db, a.to(DType::kBF16) + b, "bf16 + f32");
}

TEST_F(CudaTest, ReductionsMatchTheCpuWithinRounding) {
  Tensor x = Random({6, 9}, DType::kF32);
  Tensor dx = x.to(kCuda);
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{1}, std::vector<int64_t>{0}, std::vector<int64_t>{}}) {
    const std::string d = absl::StrCat("dims [", absl::StrJoin(dims, ","), "]");
    ExpectClose(sum(dx, dims), sum(x, dims), 1e-6, 1e-6, "sum " + d);
    ExpectClose(mean(dx, dims, true), mean(x, dims, true), 1e-6, 1e-6, "mean " + d);
    ExpectSame(amax(dx, dims), amax(x, dims), "amax " + d);
  }
  // Reductions over a non-contiguous view.
  ExpectClose(sum(dx.t(), {1}), sum(x.t(), {1}), 1e-6, 1e-6, "sum of transpose");
}

TEST_F(CudaTest, InPlaceUpdatesViewsAndFills) {
  Tensor p = Random({4, 8}, DType::kF32), g = Random({4, 8}, DType::kF32);
  Tensor m = Random({4, 8}, DType::kF32, 0.5, 1);
  Tensor dp = p.to(kCuda), dg = g.to(kCuda), dm = m.to(kCuda);
  p.add_(g, -0.1);
  dp.add_(dg, -0.1);
  p.addcdiv_(g, m, 0.01);
  dp.addcdiv_(dg, dm, 0.01);
  p.addcmul_(g, g, 0.5);
  dp.addcmul_(dg, dg, 0.5);
  m.lerp_(g, 0.1);
  dm.lerp_(dg, 0.1);
  ExpectSame(dp, p, "add_/addcdiv_/addcmul_");
  ExpectSame(dm, m, "lerp_");
  // In place through a strided view writes the viewed elements only.
  Tensor q = Random({4, 8}, DType::kF32);
  Tensor dq = q.to(kCuda);
  q.t().slice(0, 2, 6).mul_(3.0);
  dq.t().slice(0, 2, 6).mul_(3.0);
  ExpectSame(dq, q, "mul_ of a strided view");
  q.slice(1, 1, 8, 2).fill_(-4.5);
  dq.slice(1, 1, 8, 2).fill_(-4.5);
  ExpectSame(dq, q, "fill_ of a strided view");
  // copy_ across devices and dtypes.
  Tensor h = Random({4, 8}, DType::kF32);
  dq.copy_(h);
  ExpectSame(dq, h, "copy_ from the CPU");
  Tensor back = zeros({4, 8}, {.dtype = DType::kF64});
  back.copy_(dq);
  EXPECT_EQ(back.to_vector<double>(), Values(h));
  ExpectSame(zeros({3}, {.device = kCuda}) + 1.0, ones({3}), "factories on cuda");
}

TEST_F(CudaTest, MatmulMatchesTheCpuGemm) {
  // f32 through cuBLASLt (no TF32) or the emulator's host GEMM: rounding of a
  // reordered dot product, 1e-5 relative.
  Tensor a = Random({33, 17}, DType::kF32), b = Random({17, 9}, DType::kF32);
  Tensor da = a.to(kCuda), db = b.to(kCuda);
  ExpectClose(matmul(da, db), matmul(a, b), 1e-5, 1e-5, "matmul");
  ExpectClose(matmul(da.t(), da, false, false), matmul(a.t(), a), 1e-5, 1e-5, "a^T a");
  ExpectClose(matmul(db, db, true, false), matmul(b, b, true, false), 1e-5, 1e-5,
              "transpose_a flag");
  Tensor c = Random({3, 5, 4}, DType::kF32), e = Random({3, 4, 6}, DType::kF32);
  ExpectClose(matmul(c.to(kCuda), e.to(kCuda)), matmul(c, e), 1e-5, 1e-5, "batched");
  ExpectClose(matmul(c.to(kCuda), b.slice(0, 0, 4).to(kCuda)), matmul(c, b.slice(0, 0, 4)),
              1e-5, 1e-5, "broadcast B");
  // TF32 products (a GPU's tensor cores; the emulator ignores the flag)
  // keep 10 mantissa bits: 3e-3 relative.
  runtime::cuda::SetAllowTf32(true);
  ExpectClose(matmul(da, db), matmul(a, b), 3e-3, 3e-3, "matmul with TF32 allowed");
  runtime::cuda::SetAllowTf32(false);
  // bf16 accumulates in f32 and rounds once: one bf16 ulp (2^-8) relative.
  ExpectClose(matmul(da.to(DType::kBF16), db.to(DType::kBF16)),
              matmul(a.to(DType::kBF16), b.to(DType::kBF16)), 1.0 / 128, 1e-2, "bf16");
}

// Attention's batched products read q, k and v as permuted views of the
// fused QKV projection ([B, T, 3, H, D] -> [B, H, T, D]), whose batch dims
// B and H collapse to no single stride. On the device each is one
// strided-batched GEMM over all B * H products (the views copied contiguous
// first), not B calls of H products, and matches the CPU.
TEST_F(CudaTest, AttentionProductsOverPermutedViewsAreOneBatchedGemmEach) {
  runtime::cuda::Backend* backend = runtime::cuda::GetBackend();
  const bool emulated = runtime::cuda::IsEmulatorBackend(*backend);
  const int64_t B = 4, T = 5, H = 3, D = 2;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const Tensor qkv = Random({B, T, 3, H, D}, DType::kF32).to(dt);
    auto head = [&](const Tensor& x, int64_t i) {
      return x.slice(2, i, i + 1)
          .squeeze(2)
          .permute({0, 2, 1, 3});  // [B, H, T, D]
    };
    const Tensor dqkv = qkv.to(kCuda);
    const Tensor q = head(qkv, 0), k = head(qkv, 1), v = head(qkv, 2);
    const Tensor dq = head(dqkv, 0), dk = head(dqkv, 1), dv = head(dqkv, 2);
    const double tol = dt == DType::kF32 ? 1e-5 : 1.0 / 64;
    const std::string t(ir::DTypeName(dt));
    auto gemms = [&] {
      EXPECT_TRUE(backend->SynchronizeDevice().ok());
      return emulated ? runtime::cuda::GetEmulatorStats(*backend).gemms : 0;
    };
    int64_t before = gemms();
    const Tensor scores = matmul(dq, dk, false, true);  // q k^T: [B, H, T, T]
    if (emulated) {
      EXPECT_EQ(gemms() - before, 1) << "q k^T " << t;
    }
    ExpectClose(scores, matmul(q, k, false, true), tol, tol, "q k^T " + t);
    const Tensor att = softmax(matmul(q, k, false, true), -1);
    before = gemms();
    const Tensor out = matmul(att.to(kCuda), dv);  // [B, H, T, D]
    if (emulated) {
      EXPECT_EQ(gemms() - before, 1) << "att v " << t;
    }
    ExpectClose(out, matmul(att, v), tol, tol, "att v " + t);
    // The backward's products: dV = att^T dO, dAtt = dO v^T.
    const Tensor g = Random({B, H, T, D}, DType::kF32).to(dt);
    before = gemms();
    const Tensor dvv = matmul(att.to(kCuda), g.to(kCuda), true, false);
    const Tensor datt = matmul(g.to(kCuda), dv, false, true);
    if (emulated) {
      EXPECT_EQ(gemms() - before, 2) << "backward " << t;
    }
    ExpectClose(dvv, matmul(att, g, true, false), tol, tol, "att^T dO " + t);
    ExpectClose(datt, matmul(g, v, false, true), tol, tol, "dO v^T " + t);
  }
}

// cat on the device (strided and mixed-dtype operands, a negative dim)
// equals the CPU's bit for bit, with no host round trip; split and chunk
// views of device tensors join back to the original.
TEST_F(CudaTest, CatMatchesTheCpuWithoutHostRoundTrips) {
  const int64_t before = runtime::cuda::GetEagerStats().host_fallbacks;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kI64}) {
    const std::string t(ir::DTypeName(dt));
    const Tensor a = Random({3, 4}, DType::kF32, -2, 2).to(dt);
    const Tensor b = Random({3, 2}, DType::kF32, -2, 2).to(dt);
    const Tensor da = a.to(kCuda), db = b.to(kCuda);
    ExpectSame(cat({da, db}, -1), cat({a, b}, -1), "cat " + t);
    ExpectSame(cat({da.transpose(0, 1), da.transpose(0, 1)}, 0),
               cat({a.transpose(0, 1), a.transpose(0, 1)}, 0),
               "cat strided " + t);
    ExpectSame(cat(split(da, 3, 1), 1), a, "split and cat " + t);
    ExpectSame(stack(chunk(da, 2, 1), 0), stack(chunk(a, 2, 1), 0),
               "chunk and stack " + t);
  }
  const Tensor h = Random({2, 3}, DType::kBF16, -2, 2),
               f = Random({2, 3}, DType::kF32, -2, 2);
  ExpectSame(cat({h.to(kCuda), f.to(kCuda)}), cat({h, f}), "cat bf16 + f32");
  EXPECT_EQ(runtime::cuda::GetEagerStats().host_fallbacks, before)
      << runtime::cuda::HostFallbackSummary();
}

// topk (any dim, both orders, NaN and ties) and multinomial (with and
// without replacement, f32 and bf16 weights) on the device select and draw
// exactly the CPU's indices from the same seed, with no host round trip; a
// row the CPU refuses gets -1 from the device kernel, which cannot throw.
TEST_F(CudaTest, TopkAndMultinomialMatchTheCpuWithoutHostRoundTrips) {
  const int64_t before = runtime::cuda::GetEagerStats().host_fallbacks;
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    const std::string t(ir::DTypeName(dt));
    Tensor x = Random({4, 9, 5}, dt, -3, 3);
    x = where(gt(x, full({}, 2.5, {.dtype = dt})),
              full({}, std::nan(""), {.dtype = dt}), x);
    const Tensor dx = x.to(kCuda);
    for (int64_t dim : {0, 1, 2}) {
      for (bool largest : {true, false}) {
        const TopK h = topk(x, 3, dim, largest), d = topk(dx, 3, dim, largest);
        ExpectSame(d.indices, h.indices,
                   absl::StrCat("topk indices ", t, " dim ", dim));
        ExpectSame(d.values, h.values,
                   absl::StrCat("topk values ", t, " dim ", dim));
      }
    }
    const Tensor w = Random({6, 20}, dt, 0, 1);
    for (bool replacement : {false, true}) {
      manual_seed(31);
      const Tensor hs = multinomial(w, 4, replacement);
      manual_seed(31);
      const Tensor ds = multinomial(w.to(kCuda), 4, replacement);
      ExpectSame(
          ds, hs,
          absl::StrCat("multinomial ", t, replacement ? " with" : " without"));
    }
  }
  EXPECT_EQ(runtime::cuda::GetEagerStats().host_fallbacks, before)
      << runtime::cuda::HostFallbackSummary();
  const Tensor bad =
      from_vector(std::vector<float>{1, 0, 0, 0, 1, -1}, {3, 2}).to(kCuda);
  EXPECT_EQ(multinomial(bad, 2, true).to(Device::cpu()).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 0, -1, -1, -1, -1}));
}

TEST_F(CudaTest, RowKernelsMatchTheCpuWithoutHostRoundTrips) {
  const int64_t before = runtime::cuda::GetEagerStats().host_fallbacks;
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    const std::string t(ir::DTypeName(dt));
    Tensor x = Random({4, 10}, dt, -6, 6);
    Tensor dx = x.to(kCuda);
    Tensor y = from_vector(std::vector<int64_t>{3, 0, 9, 4}, {4});
    // The CPU's exp on the host emulator, CUDA's (within 2 ulp) on a GPU,
    // where a half result may then round one ulp the other way (bf16: 2^-8).
    const bool half = dt == DType::kF16 || dt == DType::kBF16;
    const double rel = test::OnRealGpu() ? (half ? 1e-2 : 1e-6) : 0;
    ExpectClose(softmax(dx, 1), softmax(x, 1), rel, 0, "softmax " + t);
    ExpectClose(softmax(dx, 0), softmax(x, 0), rel, 0, "softmax over dim 0 " + t);
    ExpectClose(log_softmax(dx, 1), log_softmax(x, 1), rel, 0, "log_softmax " + t);
    for (const char* red : {"mean", "sum", "none"}) {
      ExpectClose(cross_entropy(dx, y.to(kCuda), red, 0.1), cross_entropy(x, y, red, 0.1), rel,
                  0, absl::StrCat("cross_entropy ", red, " ", t));
    }
    ExpectSame(one_hot(y.to(kCuda), 10, dt), one_hot(y, 10, dt), "one_hot " + t);
  }
  EXPECT_EQ(runtime::cuda::GetEagerStats().host_fallbacks, before)
      << runtime::cuda::HostFallbackSummary();
  // An out-of-range target cannot stop a GPU kernel: that row's loss is NaN.
  Tensor bad = cross_entropy(ones({2, 3}, {.device = kCuda}),
                             from_vector(std::vector<int64_t>{1, 5}, {2}).to(kCuda), "none");
  const std::vector<double> v = Values(bad);
  EXPECT_FALSE(std::isnan(v[0]));
  EXPECT_TRUE(std::isnan(v[1]));
}

TEST_F(CudaTest, DeviceRandomDrawsFollowTheCpuPhiloxStream) {
  const int64_t before = runtime::cuda::GetEagerStats().host_fallbacks;
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    const std::string t(ir::DTypeName(dt));
    // Equal seeds and offsets draw equal values on both devices; 1000
    // elements cross many Philox blocks and both halves of a 64-bit counter
    // word's low part.
    Generator g1(1234), g2(1234);
    g1.set_offset(uint64_t{1} << 32);
    g2.set_offset(uint64_t{1} << 32);
    ExpectSame(rand({1000}, {.dtype = dt, .device = kCuda}, &g1),
               rand({1000}, {.dtype = dt}, &g2), "rand " + t);
    // Box-Muller through the device's log/cos: within 1e-6 relative.
    const bool half = dt == DType::kF16 || dt == DType::kBF16;
    ExpectClose(randn({7, 13}, {.dtype = dt, .device = kCuda}, &g1),
                randn({7, 13}, {.dtype = dt}, &g2),
                test::OnRealGpu() ? (half ? 1e-2 : 1e-6) : 0, 1e-7, "randn " + t);
    Tensor x = Random({50, 3}, dt);
    ExpectSame(dropout(x.to(kCuda), 0.3, true, &g1), dropout(x, 0.3, true, &g2),
               "dropout " + t);
    ExpectSame(dropout(x.to(kCuda).t(), 0.5, true, &g1), dropout(x.t(), 0.5, true, &g2),
               "dropout of a transposed view " + t);
  }
  Generator g1(99), g2(99);
  ExpectSame(randint(-5, 1000003, {333}, {.dtype = DType::kI64, .device = kCuda}, &g1),
             randint(-5, 1000003, {333}, {.dtype = DType::kI64}, &g2), "randint");
  EXPECT_EQ(runtime::cuda::GetEagerStats().host_fallbacks, before)
      << runtime::cuda::HostFallbackSummary();
}

TEST_F(CudaTest, IndexAndNormalizationKernelsMatchTheCpu) {
  const int64_t before = runtime::cuda::GetEagerStats().host_fallbacks;
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    const std::string t(ir::DTypeName(dt));
    Tensor x = Random({6, 10}, dt);
    Tensor dx = x.to(kCuda);
    ExpectSame(argmax(dx, 1), argmax(x, 1), "argmax " + t);
    ExpectSame(argmax(dx, 0, true), argmax(x, 0, true), "argmax over dim 0 " + t);
    Tensor w = Random({10}, dt), bias = Random({10}, dt);
    ExpectSame(layer_norm(dx, {10}, w.to(kCuda), bias.to(kCuda)), layer_norm(x, {10}, w, bias),
               "layer_norm " + t);
    ExpectSame(layer_norm(dx.reshape({3, 2, 10}), {2, 10}),
               layer_norm(x.reshape({3, 2, 10}), {2, 10}), "layer_norm over 2 dims " + t);
    Tensor z = Random({6, 10}, dt);
    for (const char* red : {"none", "sum", "mean"}) {
      ExpectSame(mse_loss(dx, z.to(kCuda), red), mse_loss(x, z, red),
                 absl::StrCat("mse_loss ", red, " ", t));
    }
    Tensor idx = from_vector(std::vector<int64_t>{4, 0, 4, 5, 1}, {5});
    ExpectSame(embedding(dx, idx.to(kCuda)), embedding(x, idx), "embedding " + t);
    Tensor g = Random({5, 10}, dt);
    ExpectSame(embedding_backward(g.to(kCuda), idx.to(kCuda), 6), embedding_backward(g, idx, 6),
               "embedding_backward (repeated index) " + t);
    Tensor s = Random({2, 10}, dt);
    ExpectSame(slice_backward(s.to(kCuda), {6, 10}, 0, 1, 5, 2),
               slice_backward(s, {6, 10}, 0, 1, 5, 2), "slice_backward " + t);
    ExpectSame(var(dx, {1}), var(x, {1}), "var " + t);
    ExpectSame(var(dx.reshape({3, 2, 10}), {0, 2}, 0, true),
               var(x.reshape({3, 2, 10}), {0, 2}, 0, true), "var over dims 0 and 2 " + t);
    ExpectSame(var(dx), var(x), "var of all " + t);
    ExpectSame(arange(2.5, 9.0, 0.75, {.dtype = dt, .device = kCuda}),
               arange(2.5, 9.0, 0.75, {.dtype = dt}), "arange " + t);
  }
  ExpectSame(arange(-3, 17, 2, {.dtype = DType::kI64, .device = kCuda}),
             arange(-3, 17, 2, {.dtype = DType::kI64}), "arange i64");
  EXPECT_EQ(runtime::cuda::GetEagerStats().host_fallbacks, before)
      << runtime::cuda::HostFallbackSummary();
}

// The embedding gradient of a language-model batch: many tokens over a
// small vocabulary, so that every row gathers tokens from several 256-token
// chunks of the device kernel's counting sort, plus rows no token picks.
// The device sums each row's tokens in token order in f64, as the CPU does,
// so the results are equal to the bit.
TEST_F(CudaTest, EmbeddingBackwardOfManyTokensEqualsTheCpuBitForBit) {
  const int64_t before = runtime::cuda::GetEagerStats().host_fallbacks;
  Generator gen(7);
  for (int64_t tokens : {1, 255, 256, 257, 1000, 2051}) {
    for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
      const int64_t vocab = 41, dim = 19;
      // Rows 0..36 only: rows 37..40 get no token and must come back zero.
      const Tensor idx =
          randint(0, vocab - 4, {tokens}, {.dtype = DType::kI64}, &gen);
      const Tensor g = randn({tokens, dim}, {.dtype = dt}, &gen);
      const std::string what = absl::StrCat("embedding_backward of ", tokens,
                                            " tokens, ", ir::DTypeName(dt));
      const Tensor on_device =
          embedding_backward(g.to(kCuda), idx.to(kCuda), vocab);
      ExpectSame(on_device, embedding_backward(g, idx, vocab), what);
      const std::vector<double> v = Values(on_device);
      for (int64_t r = vocab - 4; r < vocab; ++r) {
        for (int64_t j = 0; j < dim; ++j)
          EXPECT_EQ(v[r * dim + j], 0.0) << what;
      }
    }
  }
  // A [B, T] batch of indices, as a GPT's token embedding takes them.
  const Tensor idx = randint(0, 65, {16, 64}, {.dtype = DType::kI64}, &gen);
  const Tensor g = randn({16, 64, 32}, {}, &gen);
  ExpectSame(embedding_backward(g.to(kCuda), idx.to(kCuda), 65),
             embedding_backward(g, idx, 65),
             "embedding_backward of a [16, 64] batch");
  EXPECT_EQ(runtime::cuda::GetEagerStats().host_fallbacks, before)
      << runtime::cuda::HostFallbackSummary();
}

// Embedding forward and backward over more elements than the launch has
// threads, with a width the grid's stride is not a multiple of: each thread
// steps its (row, column) by additions across the wrap of a row
// (SJ_GRID_LOOP_ROWS), and lands where a division would.
TEST_F(CudaTest, EmbeddingKernelsStepRowAndColumnAcrossTheGrid) {
  Generator gen(11);
  for (int64_t dim : {1, 7, 33, 100}) {
    const int64_t vocab = 300, tokens = 517;
    const Tensor w = randn({vocab, dim}, {}, &gen);
    const Tensor idx =
        randint(0, vocab, {tokens}, {.dtype = DType::kI64}, &gen);
    const std::string what = absl::StrCat("dim ", dim);
    ExpectSame(embedding(w.to(kCuda), idx.to(kCuda)), embedding(w, idx),
               "embedding, " + what);
    const Tensor g = randn({tokens, dim}, {}, &gen);
    ExpectSame(embedding_backward(g.to(kCuda), idx.to(kCuda), vocab),
               embedding_backward(g, idx, vocab),
               "embedding_backward, " + what);
  }
}

// rms_norm (written with cast, mul, mean, add and rsqrt) on the device, with
// its gradients, against the CPU.
TEST_F(CudaTest, RmsNormAndItsGradientsMatchTheCpu) {
  const int64_t before = runtime::cuda::GetEagerStats().host_fallbacks;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const Tensor x = Random({6, 10}, DType::kF32).to(dt);
    const Tensor w = Random({10}, DType::kF32);
    const double tol = dt == DType::kF32 ? 1e-6 : 1.0 / 128;
    Tensor dx = x.to(kCuda).set_requires_grad(true);
    Tensor dw = w.to(kCuda).set_requires_grad(true);
    Tensor hx = x.clone().set_requires_grad(true);
    Tensor hw = w.clone().set_requires_grad(true);
    const Tensor y = rms_norm(dx, {10}, dw), want = rms_norm(hx, {10}, hw);
    ExpectClose(y, want, tol, tol,
                "rms_norm " + std::string(ir::DTypeName(dt)));
    sum(y).backward();
    sum(want).backward();
    ExpectClose(dx.grad(), hx.grad(), tol, tol, "rms_norm d/dx");
    ExpectClose(dw.grad(), hw.grad(), tol, tol, "rms_norm d/dw");
  }
  EXPECT_EQ(runtime::cuda::GetEagerStats().host_fallbacks, before)
      << runtime::cuda::HostFallbackSummary();
}

TEST_F(CudaTest, IntegerArgmaxRunsOnTheHostAndI32IndicesOnTheDevice) {
  const int64_t before = runtime::cuda::GetEagerStats().host_fallbacks;
  Tensor ints = from_vector(std::vector<int64_t>{3, -1, 7, 7, 2, 0}, {2, 3});
  ExpectSame(argmax(ints.to(kCuda), 1), argmax(ints, 1), "argmax of i64");
  Tensor w = Random({5, 4}, DType::kF32);
  Tensor idx = from_vector(std::vector<int64_t>{4, 0, 2}, {3}).to(DType::kI32);
  ExpectSame(embedding(w.to(kCuda), idx.to(kCuda)), embedding(w, idx), "embedding, i32 indices");
  const Tensor g = Random({3, 4}, DType::kF32);
  ExpectSame(embedding_backward(g.to(kCuda), idx.to(kCuda), 5), embedding_backward(g, idx, 5),
             "embedding_backward, i32 indices");
  // i32 indices are widened on the device; only the integer argmax went
  // through the host.
  EXPECT_EQ(runtime::cuda::GetEagerStats().host_fallbacks, before + 1);
  EXPECT_NE(runtime::cuda::HostFallbackSummary().find("argmax x"), std::string::npos)
      << runtime::cuda::HostFallbackSummary();
}

TEST_F(CudaTest, MlpTrainingStepsMatchTheCpu) {
  // The same model and batches on both devices; AdamW through five steps.
  auto make = [] {
    manual_seed(7);
    return nn::Sequential(nn::Linear(12, 16), nn::ReLU(), nn::Linear(16, 4));
  };
  nn::Sequential cpu_model = make(), cuda_model = make();
  cuda_model->to(kCuda);
  optim::AdamW cpu_opt(cpu_model->parameters(), {.lr = 1e-2});
  optim::AdamW cuda_opt(cuda_model->parameters(), {.lr = 1e-2});
  Generator data(99);
  for (int step = 0; step < 5; ++step) {
    Tensor x = rand({8, 12}, {}, &data);
    Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &data);
    cpu_opt.zero_grad();
    Tensor cpu_loss = cross_entropy(cpu_model(x), y);
    cpu_loss.backward();
    cpu_opt.step();
    cuda_opt.zero_grad();
    Tensor cuda_loss = cross_entropy(cuda_model(x.to(kCuda)), y.to(kCuda));
    cuda_loss.backward();
    cuda_opt.step();
    // Bias gradients are column sums in a different order: 1e-5 relative.
    ExpectClose(cuda_loss, cpu_loss, 1e-5, 1e-6, absl::StrCat("loss at step ", step));
  }
  auto cp = cpu_model->parameters(), dp = cuda_model->parameters();
  ASSERT_EQ(cp.size(), dp.size());
  for (size_t i = 0; i < cp.size(); ++i) {
    EXPECT_TRUE(dp[i].device().is_cuda());
    ExpectClose(dp[i], cp[i], 1e-4, 1e-5, absl::StrCat("parameter ", i));
  }
}

TEST_F(CudaTest, MixingDevicesIsAClearError) {
  Tensor a = ones({3}), b = ones({3}, {.device = kCuda});
  try {
    (void)(a + b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    // Names both operands by index and device.
    EXPECT_NE(
        std::string(e.what()).find(
            "add: input 0 is on cpu but input 1 is on cuda:0; expected every "
            "operand on one device"),
        std::string::npos)
        << e.what();
  }
  // A CPU root's seed is no CPU operand of a device graph: sum's backward
  // expands the seed to its input's shape, on the input's device.
  Tensor x = ones({2, 3}, {.device = kCuda}).set_requires_grad(true);
  sum(x * 2.0).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(x.grad().device().is_cuda());
  EXPECT_EQ(x.grad().to(Device::cpu()).to_vector<float>(),
            std::vector<float>(6, 2.0f));
  EXPECT_THROW((void)ones({3}, {.device = Device::cuda(7)}), Error);
  EXPECT_THROW((void)b.pin_memory(), Error);
}

TEST_F(CudaTest, AllocatorStatsFollowLiveTensors) {
  EXPECT_TRUE(cuda::is_available());
  EXPECT_EQ(cuda::device_count(), 1);
  EXPECT_FALSE(cuda::device_name().empty());
  cuda::synchronize();
  cuda::empty_cache();
  const auto before = cuda::memory_stats();
  {
    Tensor big = empty({1 << 20}, {.device = kCuda});  // 4 MiB, large pool
    const auto during = cuda::memory_stats();
    EXPECT_GE(during.allocated_bytes, before.allocated_bytes + (4u << 20));
    EXPECT_GE(during.reserved_bytes, during.allocated_bytes);
    EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
  }
  const auto after = cuda::memory_stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(after.reserved_bytes, before.reserved_bytes + (4u << 20));
  // The freed segment stays cached: the next request of that size reuses it.
  Tensor again = empty({1 << 20}, {.device = kCuda});
  EXPECT_GT(cuda::memory_stats().num_cache_hits, after.num_cache_hits);
  again = Tensor();
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_stats().reserved_bytes, before.reserved_bytes);
}

TEST_F(CudaTest, ANewBackendStartsWithFreshCaches) {
  if (!runtime::cuda::IsEmulatorBackend(*runtime::cuda::GetBackend())) {
    GTEST_SKIP() << "replaces the process's backend";
  }
  Tensor x = Random({3, 4}, DType::kF32);
  ExpectSame(exp(x.to(kCuda)), exp(x), "before");
  EXPECT_GT(runtime::cuda::GetEagerStats().modules_loaded, 0);
  const uint64_t generation = runtime::cuda::BackendGeneration();
  // The new backend may sit at the old one's address: caches compare the
  // generation, so nothing loaded on the old backend is handed out.
  runtime::cuda::SetBackend(runtime::cuda::MakeEmulatorBackend());
  EXPECT_EQ(runtime::cuda::BackendGeneration(), generation + 1);
  EXPECT_EQ(runtime::cuda::GetEagerStats().modules_loaded, 0);
  EXPECT_EQ(runtime::cuda::GetPinnedStats().cached_bytes, 0u);
  ExpectSame(exp(x.to(kCuda)), exp(x), "after");
  EXPECT_GT(runtime::cuda::GetEagerStats().modules_loaded, 0);
}

TEST_F(CudaTest, TheAllocatorNeitherRecordsNorQueriesEventsDuringCapture) {
  runtime::cuda::Backend* b = runtime::cuda::GetBackend();
  std::unique_ptr<runtime::cuda::DeviceMemoryBackend> memory =
      runtime::cuda::MakeAllocatorBackend(b);
  absl::StatusOr<runtime::cuda::Event> e = memory->RecordEvent(0);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(b->SynchronizeDevice().ok());
  EXPECT_TRUE(*memory->QueryEvent(*e));
  {
    runtime::cuda::FreeHold capturing;
    EXPECT_FALSE(*memory->QueryEvent(*e));  // completed, but not asked now
    EXPECT_EQ(memory->RecordEvent(0).status().code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_TRUE(*memory->QueryEvent(*e));
  memory->DestroyEvent(*e);
}

}  // namespace
}  // namespace stepjit
