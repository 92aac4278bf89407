// Helpers shared by the CUDA code generation tests: file reading, the
// golden fused regions in tests/ir/emit/cuda/*.ir (lit tests of the CUDA C
// stepjit-opt --emit=cuda prints for them; here, bodies to compile and run)
// and a few more regions, and running a region's kernels on the host
// emulation of CUDA.
#ifndef STEPJIT_TESTS_CODEGEN_CUDA_TEST_UTIL_H_
#define STEPJIT_TESTS_CODEGEN_CUDA_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/region_kernel.h"
#include "codegen/cuda/cuda_emitter.h"
#include "gtest/gtest.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "program/cpu/cpu_backend.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "testing/cuda_emulator/host_emulation.h"

namespace stepjit::codegen::cuda::test {

inline const std::filesystem::path& GoldenDir() {
  static const std::filesystem::path dir =
      std::filesystem::path(STEPJIT_TESTS_DIR) / "ir" / "emit" / "cuda";
  return dir;
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The golden .ir files, sorted by name; `skip_huge` leaves out the one
// whose region has 2^32 elements (too large to run, fine to compile).
inline std::vector<std::filesystem::path> GoldenFiles(bool skip_huge) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(GoldenDir())) {
    if (e.path().extension() != ".ir") continue;
    if (skip_huge && e.path().stem() == "huge_index64") continue;
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The texts of GoldenFiles(skip_huge).
inline std::vector<std::string> GoldenTexts(bool skip_huge) {
  std::vector<std::string> texts;
  for (const std::filesystem::path& file : GoldenFiles(skip_huge)) {
    texts.push_back(ReadFile(file));
  }
  return texts;
}

// The elementwise and in-place update ops of the op table, in its order: the
// ops a single-op kernel is emitted for.
inline std::vector<ir::OpId> ElementwiseOps() {
  std::vector<ir::OpId> ops;
  for (int i = 0; i < ir::kNumOps; ++i) {
    const ir::OpId op = static_cast<ir::OpId>(i);
    const ir::OpKind kind = ir::GetOpInfo(op).kind;
    if (kind == ir::OpKind::kElementwise || kind == ir::OpKind::kInplaceUpdate)
      ops.push_back(op);
  }
  return ops;
}

// The dtypes a cast converts between (with an integer type's casts tested
// apart).
inline constexpr ir::DType kCastDTypes[] = {ir::DType::kF32, ir::DType::kF64,
                                            ir::DType::kF16, ir::DType::kBF16,
                                            ir::DType::kBool};

// Reduced dims around a kept one (a block per output, 2-d unravel of q) in a
// mixed-precision body returning `returns`.
inline std::string MixedRegion(const std::string& returns) {
  return absl::StrCat(
      R"(graph @mixed(%p0: f16[6,50,40] input, %p1: f32[50] input) {
  %0 = cast %p0 {dtype = f32} : f32[6,50,40]
  %1 = mul %0, %0 : f32[6,50,40]
  %2 = sum %1 {dims = [0, 2], keepdim = false} : f32[50]
  %3 = amax %0 {dims = [0, 2], keepdim = false} : f32[50]
  %4 = full {shape = [], value = 0.9, dtype = f32} : f32[]
  %5 = lerp_ %p1, %2, %4 {in_place = true} : f32[50]
  %6 = sqrt %5 : f32[50]
  %7 = maximum %6, %3 : f32[50]
  return )",
      returns, "\n}");
}

// A kept dim around a reduced one (a thread per output).
inline constexpr char kMiddleRegion[] =
    R"(graph @middle(%p0: f32[6,50,40] input, %p1: f64[6,1,40] input) {
  %0 = sub %p0, %p1 : f32[6,50,40]
  %1 = mean %0 {dims = [1], keepdim = true} : f32[6,1,40]
  %2 = mul %1, %1 : f32[6,1,40]
  return %0, %2
})";

// The 2-norm of a bf16 [rows, cols] matrix: one full reduction.
inline std::string NormRegion(int64_t rows, int64_t cols) {
  const std::string dims = absl::StrCat("[", rows, ",", cols, "]");
  return absl::StrCat("graph @norm(%p0: bf16", dims, " input) {\n",
                      "  %0 = cast %p0 {dtype = f32} : f32", dims, "\n",
                      "  %1 = mul %0, %0 : f32", dims, "\n",
                      R"(  %2 = sum %1 {dims = [], keepdim = false} : f32[]
  %3 = sqrt %2 : f32[]
  return %3
})");
}

// Column reductions over many rows (a thread per output).
inline constexpr char kColumnsRegion[] =
    R"(graph @cols(%p0: f32[5000,3] input, %p1: f32[] input) {
  %0 = mul %p0, %p1 : f32[5000,3]
  %1 = amax %0 {dims = [0], keepdim = false} : f32[3]
  %2 = sum %0 {dims = [0], keepdim = true} : f32[1,3]
  %3 = reshape %2 {shape = [3]} : f32[3]
  %4 = sub %3, %1 : f32[3]
  return %4, %1
})";

// One region's operands, results (NaN-filled, so a skipped store shows) and
// temporaries (scratch slots and partials, NaN-filled too).
struct Bound {
  std::vector<Tensor> outs;
  std::vector<std::unique_ptr<std::vector<double>>> temps;
};

// Makes `b`'s buffers and appends them to `ptrs` in kernel argument order.
inline void Bind(const RegionSource& src, const ir::Graph& body,
                 const std::vector<Tensor>& args, Bound& b,
                 std::vector<void*>& ptrs) {
  for (const Tensor& a : args) ptrs.push_back(a.data_ptr());
  for (const ir::Value* r : body.returns()) {
    b.outs.push_back(
        full(r->type().shape, std::nan(""), {.dtype = r->type().dtype}));
    ptrs.push_back(b.outs.back().data_ptr());
  }
  b.temps.push_back(std::make_unique<std::vector<double>>(
      static_cast<size_t>(src.num_slots) + 1, std::nan("")));
  ptrs.push_back(b.temps.back()->data());
  for (int a = 0; a < src.num_accumulators; ++a) {
    b.temps.push_back(std::make_unique<std::vector<double>>(
        static_cast<size_t>(std::max<int64_t>(src.partials, 1)), std::nan("")));
    ptrs.push_back(b.temps.back()->data());
  }
}

// Launches `src`'s kernels from `module` in order on `ptrs`, with at most
// `grid_cap` blocks each.
inline void Launch(const HostModule& module, const RegionSource& src,
                   std::vector<void*>& ptrs, int64_t grid_cap) {
  std::vector<void*> args;
  for (void*& p : ptrs) args.push_back(&p);
  for (const KernelLaunch& k : src.kernels) {
    absl::StatusOr<HostKernel> kernel = module.Kernel(k.name);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    const absl::Status run =
        kernel->Launch(args.data(), std::min(k.grid, grid_cap), k.block);
    ASSERT_TRUE(run.ok()) << k.name << ": " << run;
  }
}

// Runs `body`'s CPU kernel on `args`; returns its results (in buffers of its
// own; the inputs stay intact).
inline std::vector<Tensor> RunOnCpu(const cpu::RegionKernel& kernel,
                                    const ir::Graph& body,
                                    const std::vector<Tensor>& args) {
  std::vector<void*> ptrs;
  std::vector<Tensor> results;
  for (const Tensor& a : args) ptrs.push_back(a.data_ptr());
  for (const ir::Value* r : body.returns()) {
    results.push_back(empty(r->type().shape, {.dtype = r->type().dtype}));
    ptrs.push_back(results.back().data_ptr());
  }
  runtime::cpu::RunRegionKernel(kernel, ptrs);
  return results;
}

inline bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data_ptr(), b.data_ptr(),
                     a.numel() * a.element_size()) == 0;
}

// Test-name suffix of a dtype-parameterized test ("f32", "bf16", ...).
inline std::string DTypeParamName(const testing::TestParamInfo<ir::DType>& p) {
  return std::string(ir::DTypeName(p.param));
}

}  // namespace stepjit::codegen::cuda::test

#endif  // STEPJIT_TESTS_CODEGEN_CUDA_TEST_UTIL_H_
