// CUDA at run time: detection through the dlopen'ed driver reports a reason
// when there is no driver or device, and every call then fails cleanly. On
// a machine with a GPU the generated regions run there and agree with the
// CPU backend's kernels for the same bodies; elsewhere those tests skip.
#include "devices/cuda/driver/device.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/cpu/region_kernel.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/nvrtc.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "program/cpu/cpu_backend.h"
#include "runtime/ops.h"
#include "tests/codegen/cuda_test_util.h"

namespace stepjit::runtime::cuda {
namespace {

namespace fs = std::filesystem;
using codegen::cuda::test::ReadFile;
using ir::DType;

TEST(CudaDeviceTest, AvailabilityIsReportedWithAReason) {
  const CudaAvailability& a = Availability();
  EXPECT_EQ(&a, &Availability());  // probed once
  if (a.available) {
    ASSERT_FALSE(a.devices.empty());
    EXPECT_GT(a.driver_version, 0);
    for (const DeviceInfo& d : a.devices) {
      EXPECT_TRUE(absl::StartsWith(d.arch(), "sm_")) << d.arch();
      std::printf("CUDA device %d: %s (%s), driver %d\n", d.ordinal,
                  d.name.c_str(), d.arch().c_str(), a.driver_version);
    }
    EXPECT_TRUE(RequireDevice().ok());
    EXPECT_TRUE(
        absl::IsInvalidArgument(SetDevice(static_cast<int>(a.devices.size()))));
    return;
  }
  std::printf("CUDA unavailable: %s\n", a.reason.c_str());
  EXPECT_FALSE(a.reason.empty());
  EXPECT_TRUE(a.devices.empty());
  const absl::Status st = RequireDevice();
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_EQ(st.message(), a.reason);
  // Every call fails the same way; nothing crashes.
  EXPECT_TRUE(absl::IsUnavailable(SetDevice(0)));
  EXPECT_TRUE(absl::IsUnavailable(Malloc(16).status()));
  EXPECT_TRUE(absl::IsUnavailable(Free(0)));
  EXPECT_TRUE(absl::IsUnavailable(CopyToDevice(0, nullptr, 0)));
  EXPECT_TRUE(absl::IsUnavailable(CopyToHost(nullptr, 0, 0)));
  EXPECT_TRUE(absl::IsUnavailable(Module::Load("not a cubin").status()));
  EXPECT_TRUE(absl::IsUnavailable(Launch({}, 1, 32, nullptr)));
  EXPECT_TRUE(absl::IsUnavailable(Synchronize()));
}

// Random values for a parameter (bool: a random mask; 0-d: near 1, as a
// step count or a decay rate).
Tensor RandomInput(const ir::TensorType& t, Generator& gen) {
  if (t.dtype == DType::kBool)
    return gt(randn(t.shape, {}, &gen), scalar_tensor(0.0));
  if (t.shape.empty()) return (rand(t.shape, {}, &gen) * 0.5 + 0.5).to(t.dtype);
  return randn(t.shape, {}, &gen).to(t.dtype);
}

// Runs `src` on the current device with `args`; returns the region's returns.
absl::StatusOr<std::vector<Tensor>> RunOnDevice(
    const codegen::cuda::RegionSource& src, const std::string& cubin,
    const ir::Graph& body, const std::vector<Tensor>& args) {
  absl::StatusOr<Module> module = Module::Load(cubin);
  if (!module.ok()) return module.status();
  std::vector<DevicePtr> ptrs;
  auto alloc = [&](size_t bytes) -> absl::StatusOr<DevicePtr> {
    absl::StatusOr<DevicePtr> p = Malloc(std::max<size_t>(bytes, 8));
    if (p.ok()) ptrs.push_back(*p);
    return p;
  };
  std::vector<Tensor> outs;
  for (const Tensor& a : args) {
    const size_t bytes = static_cast<size_t>(a.numel() * a.element_size());
    absl::StatusOr<DevicePtr> p = alloc(bytes);
    if (!p.ok()) return p.status();
    if (absl::Status st = CopyToDevice(*p, a.contiguous().data_ptr(), bytes);
        !st.ok())
      return st;
  }
  for (const ir::Value* r : body.returns()) {
    outs.push_back(empty(r->type().shape, {.dtype = r->type().dtype}));
    absl::StatusOr<DevicePtr> p = alloc(
        static_cast<size_t>(outs.back().numel() * outs.back().element_size()));
    if (!p.ok()) return p.status();
  }
  if (absl::StatusOr<DevicePtr> p =
          alloc(8 * static_cast<size_t>(src.num_slots));
      !p.ok())
    return p.status();
  for (int a = 0; a < src.num_accumulators; ++a) {
    if (absl::StatusOr<DevicePtr> p =
            alloc(8 * static_cast<size_t>(src.partials));
        !p.ok())
      return p.status();
  }
  std::vector<void*> launch_args;
  for (DevicePtr& p : ptrs) launch_args.push_back(&p);
  for (const codegen::cuda::KernelLaunch& k : src.kernels) {
    absl::StatusOr<Function> f = module->GetFunction(k.name);
    if (!f.ok()) return f.status();
    if (absl::Status st = Launch(*f, k.grid, k.block, launch_args.data());
        !st.ok())
      return st;
  }
  if (absl::Status st = Synchronize(); !st.ok()) return st;
  for (size_t r = 0; r < outs.size(); ++r) {
    const size_t bytes =
        static_cast<size_t>(outs[r].numel() * outs[r].element_size());
    if (absl::Status st =
            CopyToHost(outs[r].data_ptr(), ptrs[args.size() + r], bytes);
        !st.ok())
      return st;
  }
  for (DevicePtr p : ptrs) (void)Free(p);
  return outs;
}

// Each golden region (and the single ops of every dtype) runs on the GPU
// and matches the CPU backend: exactly for + * and comparisons, within a
// few ulps of the storage type where libdevice and the CPU's math
// (ir/poly_math.h, libm) round differently or the reduction order differs.
TEST(CudaDeviceTest, GeneratedRegionsMatchTheCpuBackend) {
  if (!Availability().available)
    GTEST_SKIP() << "needs a CUDA device: " << Availability().reason;
  if (!codegen::cuda::NvrtcAvailable())
    GTEST_SKIP() << "this build has no NVRTC";
  const std::string arch = Availability().devices[0].arch();
  const std::vector<std::string> archs = codegen::cuda::NvrtcSupportedArchs();
  if (std::find(archs.begin(), archs.end(), arch) == archs.end()) {
    GTEST_SKIP() << codegen::cuda::NvrtcCompilerId() << " cannot compile for "
                 << arch;
  }
  ASSERT_TRUE(SetDevice(0).ok());
  Generator gen(7);
  for (const fs::path& file : codegen::cuda::test::GoldenFiles(/*skip_huge=*/true)) {
    absl::StatusOr<std::unique_ptr<ir::Graph>> g =
        ir::ParseGraph(ReadFile(file));
    ASSERT_TRUE(g.ok()) << g.status();
    const ir::Graph& body = **g;
    absl::StatusOr<codegen::cuda::RegionSource> src =
        codegen::cuda::EmitRegion(body);
    ASSERT_TRUE(src.ok()) << src.status();
    absl::StatusOr<codegen::cuda::CompiledCuda> bin =
        codegen::cuda::CompileCuda(src->source, src->name,
                                   {.arch = arch, .use_cache = false});
    ASSERT_TRUE(bin.ok()) << bin.status();
    absl::StatusOr<codegen::cpu::RegionKernel> cpu =
        codegen::cpu::CompileRegion(body, {.use_cache = false});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    std::vector<Tensor> args;
    for (const ir::Value* p : body.params())
      args.push_back(RandomInput(p->type(), gen));
    const std::vector<Tensor> expect =
        codegen::cuda::test::RunOnCpu(*cpu, body, args);
    absl::StatusOr<std::vector<Tensor>> got =
        RunOnDevice(*src, bin->cubin, body, args);
    ASSERT_TRUE(got.ok()) << file.filename() << ": " << got.status();
    // A value rounded to bf16 or f16 on the way may land one ulp of that
    // type apart, and later f32 values inherit the difference.
    double ulp = 1e-6;
    for (const auto& n : body.nodes()) {
      const DType t = n->output()->type().dtype;
      if (t == DType::kBF16) ulp = std::max(ulp, 1.0 / 128);
      if (t == DType::kF16) ulp = std::max(ulp, 1.0 / 1024);
    }
    for (size_t r = 0; r < expect.size(); ++r) {
      const DType dt = expect[r].dtype();
      std::vector<double> x = (*got)[r].to(DType::kF64).to_vector<double>();
      std::vector<double> y = expect[r].to(DType::kF64).to_vector<double>();
      double worst = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(x[i]) || std::isnan(y[i])) {
          EXPECT_EQ(std::isnan(x[i]), std::isnan(y[i]))
              << file.filename() << " return " << r << " at " << i;
          continue;
        }
        worst = std::max(
            worst, std::abs(x[i] - y[i]) / (4 * ulp * (1 + std::abs(y[i]))));
      }
      EXPECT_LE(worst, 1.0) << file.filename() << " return " << r << " ("
                            << ir::DTypeName(dt) << ")";
    }
  }
}

}  // namespace
}  // namespace stepjit::runtime::cuda
