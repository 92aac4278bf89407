// GemmEpilogueKernel: the CUDA C that finishes a GEMM's bias and activation;
// GemmBiasGradKernel: the bias gradient's.
//
// cuBLASLt lacks some epilogues (exact GELU, any epilogue for some types);
// devices/cuda/cublaslt/cublaslt.h compiles these kernels and runs them after
// the product. Generating the source needs no GPU.
#ifndef STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_EPILOGUE_H_
#define STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_EPILOGUE_H_

#include <string>

#include "ir/dtype.h"
#include "runtime/gemm_args.h"

namespace stepjit::runtime::cuda {

// The CUDA C of the kernel that finishes a plan's epilogue over C for
// `dtype` and `activation` (stepjit's scalar definitions, computed in float
// for the half types and rounded once), and its kernel's name. Its
// arguments: (T* c, const T* bias, long long rows, long long cols,
// long long ldc, long long stride_c, long long batch, int keep_c); bias may
// be null, keep_c 0 starts from 0 instead of C.
struct EpilogueKernelSource {
  std::string name;
  std::string source;
};
EpilogueKernelSource GemmEpilogueKernel(ir::DType dtype,
                                        GemmActivation activation);

// The CUDA C of the kernel that writes a GEMM's bias gradient where
// cuBLASLt's BGRADB epilogue does not (runtime/gemm_args.h's bias_grad),
// summing in float (double for f64) and rounding once. Its arguments:
// (const T* a, T* bias_grad, long long rows, long long k, long long lda,
// int trans_a): bias_grad[i] = sum over l < k of op(A)[i, l] for i < rows,
// A row-major with pitch lda (stored k x rows when trans_a). Launched with
// blocks of a multiple of 32 threads, up to 1024: each block sums 32 rows
// at a time (grid-stride), in a fixed order for a given block size.
EpilogueKernelSource GemmBiasGradKernel(ir::DType dtype);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_CUBLASLT_CUBLASLT_EPILOGUE_H_
