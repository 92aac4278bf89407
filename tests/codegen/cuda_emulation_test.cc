// The generated CUDA C computes the right numbers, checked without a GPU:
// the kernels are compiled as host C++ against the emulation of the CUDA
// built-ins (testing/cuda_emulator/host_emulation.h: each block's threads as
// fibers, the CPU's math functions, _Float16 and bfloat16 bit tricks for the
// half types) and launched with a deliberately small grid so every
// grid-stride and chunk loop wraps. Results
// match the eager kernels bit for bit (the same scalar definitions and math)
// and the CPU backend's kernels within the rounding of a reordered sum.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/region_kernel.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/single_op.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "program/cpu/cpu_backend.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"
#include "testing/cuda_emulator/host_emulation.h"
#include "tests/codegen/cuda_test_util.h"

namespace stepjit::codegen::cuda {
namespace {

using ir::AttrKey;
using ir::DType;
using ir::OpId;
using ir::TensorType;

// Launches use at most this many blocks, so grid-stride loops go round.
constexpr int64_t kEmulatedGrid = 3;
constexpr int kEmulatedBlock = 64;  // two warps: the cross-warp step runs too

// The regions compiled into one host module.
class EmulatedModule {
 public:
  static std::unique_ptr<EmulatedModule> Build(
      const std::vector<const RegionSource*>& regions,
      const std::string& name) {
    std::vector<std::string> kernels;
    for (const RegionSource* r : regions) {
      for (const KernelLaunch& k : r->kernels) kernels.push_back(k.name);
    }
    absl::StatusOr<HostModule> module =
        CompileForHost(CombineSources(regions), name, kernels);
    if (!module.ok()) {
      ADD_FAILURE() << module.status();
      return nullptr;
    }
    return std::unique_ptr<EmulatedModule>(
        new EmulatedModule(*std::move(module)));
  }

  // Runs the region's kernels in order; returns its outputs.
  // With `misalign`, every buffer starts one element past an aligned
  // address, so no vector path may run.
  std::vector<Tensor> Run(const RegionSource& src, const ir::Graph& body,
                          const std::vector<Tensor>& args,
                          bool misalign = false) {
    std::vector<Tensor> outs, buffers;
    std::vector<void*> ptrs;
    auto place = [&](const Tensor& t) {
      if (!misalign) return t.data_ptr();
      buffers.push_back(empty({t.numel() + 1}, {.dtype = t.dtype()}));
      char* p =
          static_cast<char*>(buffers.back().data_ptr()) + t.element_size();
      std::memcpy(p, t.data_ptr(), t.numel() * t.element_size());
      return static_cast<void*>(p);
    };
    for (const Tensor& a : args) ptrs.push_back(place(a));
    for (const ir::Value* r : body.returns()) {
      outs.push_back(
          full(r->type().shape, std::nan(""), {.dtype = r->type().dtype}));
      ptrs.push_back(place(outs.back()));
    }
    std::vector<double> scratch(static_cast<size_t>(src.num_slots) + 1,
                                std::nan(""));
    ptrs.push_back(scratch.data());
    std::vector<std::vector<double>> accs(
        static_cast<size_t>(src.num_accumulators),
        std::vector<double>(static_cast<size_t>(src.partials), std::nan("")));
    for (auto& a : accs) ptrs.push_back(a.data());
    // cuLaunchKernel's convention: each argument by the address of its value.
    std::vector<void*> arg_addresses;
    for (void*& p : ptrs) arg_addresses.push_back(&p);
    for (const KernelLaunch& k : src.kernels) {
      absl::StatusOr<HostKernel> kernel = module_.Kernel(k.name);
      EXPECT_TRUE(kernel.ok()) << kernel.status();
      if (!kernel.ok()) return outs;
      const absl::Status run = kernel->Launch(
          arg_addresses.data(), std::min(k.grid, kEmulatedGrid), k.block);
      EXPECT_TRUE(run.ok()) << run;
    }
    for (size_t r = 0; misalign && r < outs.size(); ++r) {
      std::memcpy(outs[r].data_ptr(), ptrs[args.size() + r],
                  outs[r].numel() * outs[r].element_size());
    }
    return outs;
  }

 private:
  explicit EmulatedModule(HostModule module) : module_(std::move(module)) {}
  HostModule module_;
};

// Bit-equal (any NaN equals any NaN), else the worst difference relative to
// `tol * (1 + |expected|)`; 0 when equal.
double Mismatch(const Tensor& got, const Tensor& expect, double tol) {
  if (got.dtype() != expect.dtype() || got.shape() != expect.shape())
    return INFINITY;
  std::vector<double> x = got.to(DType::kF64).to_vector<double>();
  std::vector<double> y =
      expect.contiguous().to(DType::kF64).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
      continue;
    }
    if (x[i] == y[i]) continue;
    worst = std::max(
        worst, tol == 0 ? INFINITY
                        : std::abs(x[i] - y[i]) / (tol * (1 + std::abs(y[i]))));
  }
  return worst;
}

Tensor RandomInput(const TensorType& t, Generator& gen, bool positive) {
  if (t.dtype == DType::kBool)
    return gt(randn(t.shape, {}, &gen), scalar_tensor(0.0));
  Tensor x =
      positive ? rand(t.shape, {}, &gen) + 0.5 : randn(t.shape, {}, &gen) * 2.0;
  return x.to(t.dtype);
}

struct SingleOp {
  OpId op;
  std::vector<TensorType> in;
  ir::Attrs attrs;
  std::unique_ptr<ir::Graph> body;
  RegionSource src;
};

// Every elementwise and in-place op of the op table in one dtype: full,
// 0-d, broadcast and one-element operands, casts, where and reductions; each
// against the eager kernel.
class EmulatedSingleOps : public testing::TestWithParam<DType> {};

TEST_P(EmulatedSingleOps, MatchEagerBitForBit) {
  if (HostCompiler().empty())
    GTEST_SKIP() << "no host C++ compiler to build the emulation";
  const DType dt = GetParam();
  std::vector<SingleOp> ops;
  auto add = [&](OpId op, std::vector<TensorType> in, ir::Attrs attrs = {}) {
    absl::StatusOr<std::unique_ptr<ir::Graph>> body =
        SingleOpBody(op, in, attrs);
    ASSERT_TRUE(body.ok()) << ir::OpName(op) << ": " << body.status();
    absl::StatusOr<RegionSource> src = EmitRegion(
        **body, {.block = kEmulatedBlock, .allow_one_element = true});
    ASSERT_TRUE(src.ok()) << ir::OpName(op) << ": " << src.status();
    ops.push_back({op, std::move(in), std::move(attrs), *std::move(body),
                   *std::move(src)});
  };
  const TensorType v{dt, {301}}, s{dt, {}}, one{dt, {1}}, row{dt, {75}},
      mat{dt, {4, 75}};
  for (const OpId op : test::ElementwiseOps()) {
    const ir::OpInfo& info = ir::GetOpInfo(op);
    if (op == OpId::kCast) {
      for (DType to : test::kCastDTypes) {
        if (to != dt) add(op, {v}, {{AttrKey::kDTypeAttr, to}});
      }
      add(op, {{DType::kBool, {301}}}, {{AttrKey::kDTypeAttr, dt}});
    } else if (op == OpId::kWhere) {
      add(op, {{DType::kBool, {4, 75}}, mat, row});
      add(op, {{DType::kBool, {301}}, v, s});
    } else if (info.kind == ir::OpKind::kInplaceUpdate) {
      add(op, std::vector<TensorType>(info.max_arity, v),
          {{AttrKey::kAlpha, 0.5},
           {AttrKey::kValue, -0.25},
           {AttrKey::kInPlace, true}});
    } else if (info.min_arity == 1) {
      add(op, {v});
      add(op, {one});
    } else {
      add(op, {v, v});
      add(op, {v, s});
      add(op, {mat, row});
    }
  }
  for (OpId op : {OpId::kSum, OpId::kMean, OpId::kAmax}) {
    for (const std::vector<int64_t>& dims :
         {std::vector<int64_t>{1}, {0}, {}}) {
      add(op, {{dt, {20, 150}}},
          {{AttrKey::kDims, dims}, {AttrKey::kKeepdim, false}});
    }
  }
  std::vector<const RegionSource*> all;
  for (const SingleOp& o : ops) all.push_back(&o.src);
  std::unique_ptr<EmulatedModule> module = EmulatedModule::Build(
      all, absl::StrCat("single_ops_", ir::DTypeName(dt)));
  ASSERT_NE(module, nullptr);
  Generator gen(21);
  for (const SingleOp& o : ops) {
    std::vector<Tensor> args;
    for (size_t k = 0; k < o.in.size(); ++k)
      args.push_back(RandomInput(o.in[k], gen, k > 0));
    std::vector<Tensor> eager_args;
    for (const Tensor& a : args) eager_args.push_back(a.clone());
    const Tensor expect = runtime::Dispatch(o.op, eager_args, o.attrs);
    // 301 elements: 75 vectors and a tail; then the unaligned fallback.
    const Tensor got = module->Run(o.src, *o.body, args)[0];
    const Tensor unaligned = module->Run(o.src, *o.body, args, true)[0];
    // Eager reductions accumulate in another order: the last bit may differ.
    const double tol =
        ir::IsFloating(dt) && ir::GetOpInfo(o.op).kind == ir::OpKind::kReduction
            ? (dt == DType::kF64 ? 1e-14 : 1e-6)
            : 0;
    EXPECT_LE(Mismatch(got, expect, tol), 1.0)
        << o.src.name << " (" << ir::OpName(o.op) << ")";
    EXPECT_LE(Mismatch(unaligned, expect, tol), 1.0)
        << o.src.name << " (" << ir::OpName(o.op) << ", unaligned)";
  }
}

INSTANTIATE_TEST_SUITE_P(FloatDTypes, EmulatedSingleOps,
                         testing::Values(DType::kF32, DType::kF64, DType::kF16,
                                         DType::kBF16),
                         test::DTypeParamName);

// The golden fused regions and reductions of every layout, against the CPU
// backend's kernels for the same bodies.
TEST(CudaEmulationTest, FusedRegionsMatchTheCpuBackend) {
  if (HostCompiler().empty())
    GTEST_SKIP() << "no host C++ compiler to build the emulation";
  std::vector<std::string> texts = test::GoldenTexts(/*skip_huge=*/true);
  texts.push_back(test::MixedRegion("%7, %5, %1"));
  texts.push_back(test::kMiddleRegion);
  // Many chunks per row (a full reduction) and per column (few columns).
  texts.push_back(test::NormRegion(64, 256));
  texts.push_back(test::kColumnsRegion);
  texts.push_back(
      R"(graph @scaler(%p0: f32[] input, %p1: f16[300,7] input, %p2: bool[] input, %p3: f32[7] input) {
  %0 = full {shape = [], value = 1.0, dtype = f32} : f32[]
  %1 = div %0, %p0 : f32[]
  %2 = cast %p1 {dtype = f32} : f32[300,7]
  %3 = mul %2, %1 : f32[300,7]
  %4 = ne %3, %3 : bool[300,7]
  %5 = where %p2, %3, %2 : f32[300,7]
  %6 = add %5, %p3 : f32[300,7]
  %7 = cast %6 {dtype = f16} : f16[300,7]
  return %7, %4, %1
})");
  // Vectors of mixed widths (f32, bf16, bool, f64) and a tail of 1001 % 4.
  texts.push_back(
      R"(graph @mixed_vectors(%p0: f32[7,143] input, %p1: bf16[7,143] input, %p2: f64[] input) {
  %0 = cast %p1 {dtype = f32} : f32[7,143]
  %1 = mul %p0, %0 : f32[7,143]
  %2 = cast %p2 {dtype = f32} : f32[]
  %3 = gt %1, %2 : bool[7,143]
  %4 = cast %1 {dtype = f64} : f64[7,143]
  %5 = tanh %4 : f64[7,143]
  return %3, %5, %1
})");
  std::vector<std::unique_ptr<ir::Graph>> bodies;
  std::vector<RegionSource> regions;
  for (const std::string& text : texts) {
    absl::StatusOr<std::unique_ptr<ir::Graph>> g = ir::ParseGraph(text);
    ASSERT_TRUE(g.ok()) << g.status() << "\n" << text;
    absl::StatusOr<RegionSource> r = EmitRegion(**g, {.block = kEmulatedBlock});
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << text;
    bodies.push_back(*std::move(g));
    regions.push_back(*std::move(r));
  }
  std::vector<const RegionSource*> all;
  for (const RegionSource& r : regions) all.push_back(&r);
  std::unique_ptr<EmulatedModule> module = EmulatedModule::Build(all, "fused");
  ASSERT_NE(module, nullptr);
  Generator gen(5);
  for (size_t k = 0; k < regions.size(); ++k) {
    const ir::Graph& body = *bodies[k];
    absl::StatusOr<cpu::RegionKernel> cpu =
        cpu::CompileRegion(body, {.use_cache = false});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    std::vector<Tensor> args;
    for (const ir::Value* p : body.params())
      args.push_back(RandomInput(p->type(), gen, p->type().shape.empty()));
    const std::vector<Tensor> expect = test::RunOnCpu(*cpu, body, args);
    const bool reduces = regions[k].reduced_numel > 0;
    // Only elementwise regions have a vector path to avoid.
    for (bool misalign : {false, true}) {
      if (misalign && reduces) continue;
      std::vector<Tensor> got = module->Run(regions[k], body, args, misalign);
      for (size_t r = 0; r < expect.size(); ++r) {
        // Sums run in another order than the CPU's: equal to the rounding of
        // the result.
        const bool exact = !reduces || body.returns()[r]->type().shape ==
                                           body.params()[0]->type().shape;
        EXPECT_LE(Mismatch(got[r], expect[r], exact ? 0 : 1e-6), 1.0)
            << body.name() << " return " << r << " (" << regions[k].name
            << (misalign ? ", unaligned)" : ")");
      }
    }
  }
}

}  // namespace
}  // namespace stepjit::codegen::cuda
