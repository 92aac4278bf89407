// GemmEpilogueKernel: C = act(C + bias) as CUDA C from stepjit's scalar defs;
// GemmBiasGradKernel: row sums of op(A).
#include "devices/cuda/cublaslt/cublaslt_epilogue.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_c.h"
#include "codegen/cuda/cuda_math.h"
#include "ir/gemm_activation.h"
#include "ir/scalar_def.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {

namespace {

using ir::DType;

}  // namespace

EpilogueKernelSource GemmEpilogueKernel(DType dtype,
                                        GemmActivation activation) {
  using codegen::cuda::CudaMath;
  using codegen::cuda::CudaStatements;
  const bool is_double = dtype == DType::kF64;
  const std::string reg = codegen::cuda::RegType(dtype);
  const std::string mem = codegen::cuda::MemType(dtype);
  EpilogueKernelSource k;
  k.name = absl::StrCat("sj_gemm_epilogue_", ir::DTypeName(dtype), "_",
                        GemmActivationName(activation));
  CudaStatements body;
  body.indent = "    ";
  CudaMath m{body, is_double};
  std::string y = "x";
  if (activation.has_value()) {
    const bool known = ir::VisitGemmActivation(*activation, [&]<ir::OpId op>() {
      y = ir::ScalarDef<op>::Apply(m, y);
    });
    SJ_CHECK(known, "GemmEpilogueKernel: ", ir::OpName(*activation),
             " is not a GEMM activation");
  }
  const uint32_t helpers = codegen::cuda::DTypeHelpers(dtype);
  k.source = absl::StrCat(
      codegen::cuda::Preamble(helpers),
      "// C = act(C + bias) over a batch of row-major matrices, after a GEMM.\n"
      "extern \"C\" __global__ void ",
      k.name, "(", mem, "* c, const ", mem,
      "* bias, long long rows, long long cols, long long ldc,\n"
      "    long long stride_c, long long batch, int keep_c) {\n"
      "  const long long total = rows * cols * batch;\n"
      "  const long long step = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;"
      " i < total;\n"
      "       i += step) {\n"
      "    const long long col = i % cols;\n"
      "    const long long row = (i / cols) % rows;\n"
      "    const long long at = i / cols / rows * stride_c + row * ldc + col;\n"
      "    ",
      reg, " x = keep_c ? ", codegen::cuda::Load(dtype, "c", "at"), " : ",
      m.Const(0), ";\n", "    if (bias != nullptr) x = x + ",
      codegen::cuda::Load(dtype, "bias", "col"), ";\n", body.text, "    ",
      codegen::cuda::Store(dtype, "c", "at", y), "\n  }\n}\n");
  return k;
}

EpilogueKernelSource GemmBiasGradKernel(DType dtype) {
  const std::string reg = codegen::cuda::RegType(dtype);
  const std::string mem = codegen::cuda::MemType(dtype);
  const uint32_t helpers = codegen::cuda::DTypeHelpers(dtype);
  const std::string zero = codegen::cuda::CudaLiteral(0, dtype == DType::kF64);
  EpilogueKernelSource k;
  k.name = absl::StrCat("sj_gemm_bias_grad_", ir::DTypeName(dtype));
  // A block takes 32 rows of op(A) at a time, with all its warps on them,
  // and sums each row in a fixed order (deterministic): with trans_a (a
  // weight gradient's dY^T, row i strided by lda) the lanes take 32
  // neighbouring rows, so a warp reads 32 neighbouring elements, and the
  // warps split l, their partial sums added in warp order; without, a warp
  // takes a row, its lanes split l (neighbouring elements), the lanes'
  // partial sums added in lane order. Blocks of up to 1024 threads.
  k.source = absl::StrCat(
      codegen::cuda::Preamble(helpers),
      "// bias_grad[i] = sum over l of op(A)[i, l], beside a GEMM.\n"
      "extern \"C\" __global__ void ",
      k.name, "(const ", mem, "* a, ", mem,
      "* bias_grad, long long rows,\n"
      "    long long k, long long lda, int trans_a) {\n"
      "  __shared__ ",
      reg,
      " part[32][33];\n"
      "  const int x = threadIdx.x & 31, y = threadIdx.x >> 5;\n"
      "  const int warps = blockDim.x >> 5;\n"
      "  for (long long i0 = (long long)blockIdx.x * 32; i0 < rows;\n"
      "       i0 += (long long)gridDim.x * 32) {\n"
      "    if (trans_a) {\n"
      "      ",
      reg, " s = ", zero,
      ";\n"
      "      if (i0 + x < rows) {\n"
      "        for (long long l = y; l < k; l += warps)\n"
      "          s = s + ",
      codegen::cuda::Load(dtype, "a", "l * lda + i0 + x"),
      ";\n"
      "      }\n"
      "      part[y][x] = s;\n"
      "    } else {\n"
      "      for (int r = y; r < 32; r += warps) {\n"
      "        ",
      reg, " s = ", zero,
      ";\n"
      "        if (i0 + r < rows) {\n"
      "          for (long long l = x; l < k; l += 32)\n"
      "            s = s + ",
      codegen::cuda::Load(dtype, "a", "(i0 + r) * lda + l"),
      ";\n"
      "        }\n"
      "        part[r][x] = s;\n"
      "      }\n"
      "    }\n"
      "    __syncthreads();\n"
      "    if (y == 0 && i0 + x < rows) {\n"
      "      ",
      reg, " s = ", zero,
      ";\n"
      "      const int parts = trans_a ? warps : 32;\n"
      "      for (int w = 0; w < parts; ++w)\n"
      "        s = s + (trans_a ? part[w][x] : part[x][w]);\n"
      "      ",
      codegen::cuda::Store(dtype, "bias_grad", "i0 + x", "s"),
      "\n"
      "    }\n"
      "    __syncthreads();\n"
      "  }\n"
      "}\n");
  return k;
}

}  // namespace stepjit::runtime::cuda
