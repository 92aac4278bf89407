// GemmBiasGradKernel, the bias gradient written beside a cuBLASLt GEMM where
// its BGRADB epilogue does not: run on the CUDA backend (the host emulator
// unless STEPJIT_TEST_CUDA_BACKEND=driver) against a float64 loop, for both
// layouts of op(A), sizes around the kernel's 32-row tiles and block sizes
// from one warp to 1024 threads.
#include <cmath>
#include <cstdint>
#include <vector>

#include "devices/cuda/backend.h"
#include "devices/cuda/cublaslt/cublaslt_epilogue.h"
#include "devices/cuda/ops.h"
#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_backend.h"

namespace stepjit {
namespace {

using runtime::cuda::Backend;
using runtime::cuda::EpilogueKernelSource;
using runtime::cuda::GemmBiasGradKernel;
using test::CudaTest;

const Device kCuda = Device::cuda(0);

// bias_grad[i] = sum over l of op(A)[i, l], A stored `stored` (k x rows with
// trans_a, else rows x k) with pitch lda.
std::vector<double> Reference(const std::vector<double>& a, int64_t rows,
                              int64_t k, int64_t lda, bool trans_a) {
  std::vector<double> out(rows, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t l = 0; l < k; ++l)
      out[i] += a[trans_a ? l * lda + i : i * lda + l];
  }
  return out;
}

TEST_F(CudaTest, GemmBiasGradKernelSumsEveryRowOfEitherLayout) {
  Backend* b = runtime::cuda::GetBackend();
  ASSERT_NE(b, nullptr);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
    const EpilogueKernelSource src = GemmBiasGradKernel(dtype);
    absl::StatusOr<std::shared_ptr<runtime::cuda::LoadedModule>> module =
        b->LoadSource(src.source, src.name, {src.name});
    ASSERT_TRUE(module.ok()) << module.status() << "\n" << src.source;
    absl::StatusOr<runtime::cuda::KernelHandle> fn =
        (*module)->Function(src.name);
    ASSERT_TRUE(fn.ok()) << fn.status();
    for (bool trans_a : {false, true}) {
      for (int64_t rows : {1, 31, 33, 100}) {
        for (int64_t k : {1, 7, 300}) {
          for (int block : {32, 256, 1024}) {
            // A pitch wider than the stored rows: padding the kernel must skip.
            const int64_t stored_rows = trans_a ? k : rows;
            const int64_t stored_cols = trans_a ? rows : k;
            const int64_t lda = stored_cols + 3;
            manual_seed(static_cast<uint64_t>(rows * 1000 + k));
            const Tensor a = randn({stored_rows, lda}).to(dtype);
            const std::vector<double> expected =
                Reference(test::Values(a), rows, k, lda, trans_a);
            const Tensor a_dev = a.to(kCuda);
            Tensor out = full({rows}, -7.0, {.dtype = dtype, .device = kCuda});
            const void* ap = a_dev.data_ptr();
            void* op = out.data_ptr();
            long long r = rows, kk = k, ld = lda;
            int t = trans_a ? 1 : 0;
            void* args[] = {&ap, &op, &r, &kk, &ld, &t};
            // Two blocks at most: the grid-stride loop covers the rest.
            const int64_t grid = std::min<int64_t>((rows + 31) / 32, 2);
            ASSERT_TRUE(b->Launch(*fn, grid, block, args,
                                  runtime::cuda::CurrentStream())
                            .ok());
            const std::vector<double> got = test::Values(out.to(Device::cpu()));
            // Summed in float (double for f64), rounded once to the dtype.
            const double tol = dtype == DType::kBF16  ? 1e-2
                               : dtype == DType::kF32 ? 1e-5
                                                      : 1e-12;
            for (int64_t i = 0; i < rows; ++i) {
              EXPECT_NEAR(got[i], expected[i],
                          tol * (std::abs(expected[i]) + std::sqrt(k)))
                  << ir::DTypeName(dtype) << " trans_a " << trans_a << " rows "
                  << rows << " k " << k << " block " << block << " row " << i;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace stepjit
