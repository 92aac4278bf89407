// OpenBLAS vs oneDNN on the GEMMs of an MLP 784-512-512-10 step, batch 128,
// and of one layer of the char-LM GPT step.
//
// These numbers decide ChooseBackend in devices/cpu/gemm.cc. Reproduce with
//   stepjit_benchmarks --benchmark_filter='Gemm|GemmStep'
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// and read the medians. Shapes use libtorch's Linear layout, W[out, in]:
//   forward  Y  = X  · W^T   m=batch n=out k=in  (NT)
//   backward dX = dY · W     m=batch n=in  k=out (NN)
//            dW = dY^T · X   m=out   n=in  k=batch (TN)
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cpu/gemm.h"
#include "ir/dtype.h"

namespace stepjit::runtime::cpu {
namespace {

using ir::DType;

struct Shape {
  std::string name;
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t batch = 1;  // dense matrices one after another
};

std::vector<Shape> MlpShapes() {
  constexpr int64_t kBatch = 128;
  const int64_t layers[][2] = {{784, 512}, {512, 512}, {512, 10}};
  std::vector<Shape> shapes;
  for (int i = 0; i < 3; ++i) {
    const int64_t in = layers[i][0], out = layers[i][1];
    const std::string l = absl::StrCat("L", i + 1);
    shapes.push_back({l + "_fwd_NT", false, true, kBatch, out, in});
    shapes.push_back({l + "_dX_NN", false, false, kBatch, in, out});
    shapes.push_back({l + "_dW_TN", true, false, out, in, kBatch});
  }
  return shapes;
}

// The GEMMs of one layer of the char-LM GPT step (gpt_d128_l4_t128_b32:
// 4096 tokens, width 128, MLP 512, 4 heads of 32 over context 128): the
// four Linear layers forward and backward, and attention's batched
// products (32 x 4 matrices of 128 x 128 scores).
std::vector<Shape> GptShapes() {
  constexpr int64_t kTokens = 4096, kT = 128, kDh = 32, kHeads = 32 * 4;
  const int64_t layers[][2] = {{128, 384}, {128, 128}, {128, 512}, {512, 128}};
  const char* names[] = {"qkv", "out", "fc1", "fc2"};
  std::vector<Shape> shapes;
  for (int i = 0; i < 4; ++i) {
    const int64_t in = layers[i][0], out = layers[i][1];
    const std::string l = absl::StrCat("gpt_", names[i]);
    shapes.push_back({l + "_fwd_NT", false, true, kTokens, out, in});
    shapes.push_back({l + "_dX_NN", false, false, kTokens, in, out});
    shapes.push_back({l + "_dW_TN", true, false, out, in, kTokens});
  }
  shapes.push_back({"gpt_scores_NT", false, true, kT, kT, kDh, kHeads});
  shapes.push_back({"gpt_av_NN", false, false, kT, kDh, kT, kHeads});
  shapes.push_back({"gpt_dscores_NT", false, true, kT, kT, kDh, kHeads});
  shapes.push_back({"gpt_dv_TN", true, false, kT, kDh, kT, kHeads});
  return shapes;
}

// Small square products (NN), to find where per-call overhead dominates.
std::vector<Shape> SmallShapes() {
  std::vector<Shape> shapes;
  for (int64_t n : {4, 16, 32, 64, 128}) {
    shapes.push_back({absl::StrCat("sq", n, "_NN"), false, false, n, n, n});
  }
  return shapes;
}

// Dense operands for one shape, filled with values in [-1, 1].
struct Operands {
  std::vector<uint8_t> a, b, c;
  GemmArgs args;
};

Operands MakeOperands(const Shape& s, DType dtype, GemmBackend backend) {
  const int64_t size = ir::DTypeSize(dtype);
  Operands o;
  o.a.resize(s.batch * s.m * s.k * size);
  o.b.resize(s.batch * s.k * s.n * size);
  o.c.resize(s.batch * s.m * s.n * size);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::vector<uint8_t>* buf : {&o.a, &o.b}) {
    for (int64_t i = 0; i < static_cast<int64_t>(buf->size()) / size; ++i) {
      const float v = dist(rng);
      if (dtype == DType::kF32) {
        reinterpret_cast<float*>(buf->data())[i] = v;
      } else {
        reinterpret_cast<ir::BFloat16*>(buf->data())[i] = ir::BFloat16(v);
      }
    }
  }
  o.args = GemmArgs{.dtype = dtype,
                    .trans_a = s.trans_a,
                    .trans_b = s.trans_b,
                    .m = s.m,
                    .n = s.n,
                    .k = s.k,
                    .a = o.a.data(),
                    .lda = s.trans_a ? s.m : s.k,
                    .b = o.b.data(),
                    .ldb = s.trans_b ? s.k : s.n,
                    .c = o.c.data(),
                    .ldc = s.n,
                    .batch = s.batch,
                    .stride_a = s.m * s.k,
                    .stride_b = s.k * s.n,
                    .stride_c = s.m * s.n,
                    .backend = backend};
  return o;
}

void BM_Gemm(benchmark::State& state, Shape shape, DType dtype,
             GemmBackend backend) {
  Operands o = MakeOperands(shape, dtype, backend);
  for (auto _ : state) {
    absl::Status st = Gemm(o.args);
    if (!st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * shape.batch * shape.m * shape.n * shape.k * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

// All nine GEMMs back to back, as a step runs them (kAuto switches between
// OpenBLAS's pthreads and oneDNN's OpenMP team). With `busy` set, one thread
// spins alongside, as a data-loader worker or another process would: on two
// cores that tests how each library's thread team copes with losing a core.
void BM_GemmStep(benchmark::State& state, GemmBackend backend, bool busy) {
  std::vector<Operands> ops;
  for (const Shape& s : MlpShapes()) {
    ops.push_back(MakeOperands(s, DType::kF32, backend));
  }
  std::atomic<bool> stop{false};
  std::thread spinner;
  if (busy) {
    spinner = std::thread([&stop] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  }
  for (auto _ : state) {
    for (Operands& o : ops) {
      if (!Gemm(o.args).ok()) state.SkipWithError("Gemm failed");
      benchmark::DoNotOptimize(o.c.data());
    }
    benchmark::ClobberMemory();
  }
  stop = true;
  if (spinner.joinable()) spinner.join();
}

const bool kRegistered = [] {
  const struct {
    DType dtype;
    GemmBackend backend;
  } configs[] = {{DType::kF32, GemmBackend::kOpenBlas},
                 {DType::kF32, GemmBackend::kOneDnn},
                 {DType::kF32, GemmBackend::kAuto},
                 {DType::kBF16, GemmBackend::kOneDnn},
                 {DType::kBF16, GemmBackend::kOpenBlas}};
  std::vector<Shape> shapes = MlpShapes();
  for (const Shape& s : GptShapes()) shapes.push_back(s);
  for (const Shape& s : shapes) {
    for (const auto& c : configs) {
      benchmark::RegisterBenchmark(
          absl::StrCat("Gemm/", s.name, "/", ir::DTypeName(c.dtype), "/",
                       GemmBackendName(c.backend))
              .c_str(),
          BM_Gemm, s, c.dtype, c.backend)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  for (const Shape& s : SmallShapes()) {
    for (GemmBackend b : {GemmBackend::kOpenBlas, GemmBackend::kOneDnn}) {
      benchmark::RegisterBenchmark(
          absl::StrCat("Gemm/", s.name, "/f32/", GemmBackendName(b)).c_str(),
          BM_Gemm, s, DType::kF32, b)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  for (bool busy : {false, true}) {
    for (GemmBackend b :
         {GemmBackend::kOpenBlas, GemmBackend::kOneDnn, GemmBackend::kAuto}) {
      benchmark::RegisterBenchmark(
          absl::StrCat("GemmStep/f32/", GemmBackendName(b),
                       busy ? "/busy1" : "")
              .c_str(),
          BM_GemmStep, b, busy)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  return true;
}();

}  // namespace
}  // namespace stepjit::runtime::cpu
