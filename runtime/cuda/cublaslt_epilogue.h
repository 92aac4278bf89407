// GemmEpilogueKernel: the CUDA C that finishes a GEMM's bias and activation.
//
// cuBLASLt lacks some epilogues (exact GELU, any epilogue for some types);
// runtime/cuda/cublaslt.h compiles this kernel and runs it over C after the
// product. Generating the source needs no GPU.
#ifndef STEPJIT_RUNTIME_CUDA_CUBLASLT_EPILOGUE_H_
#define STEPJIT_RUNTIME_CUDA_CUBLASLT_EPILOGUE_H_

#include <string>

#include "ir/dtype.h"
#include "runtime/cpu/gemm.h"

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
                                        cpu::GemmActivation activation);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_RUNTIME_CUDA_CUBLASLT_EPILOGUE_H_
