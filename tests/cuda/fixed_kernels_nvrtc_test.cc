// The hand-written CUDA modules (copies and fills, one_hot, random draws,
// gathers and var, convolutions and pools) compile with NVRTC for every
// architecture the project targets, with the flags generated kernels use, and
// export every kernel the runtime asks for. No GPU is needed.
#include <string>

#include "codegen/cuda/nvrtc.h"
#include "devices/cuda/kernels/conv_ops.h"
#include "devices/cuda/kernels/copy.h"
#include "devices/cuda/kernels/index_ops.h"
#include "devices/cuda/kernels/random_ops.h"
#include "devices/cuda/kernels/row_ops.h"
#include "gtest/gtest.h"

namespace stepjit {
namespace {

void ExpectCompiles(const char* source, const char* name,
                    const std::vector<std::string>& kernels) {
  if (!codegen::cuda::NvrtcAvailable()) GTEST_SKIP() << "this build has no NVRTC";
  for (const char* arch : {"sm_80", "sm_90"}) {
    absl::StatusOr<codegen::cuda::CompiledCuda> c = codegen::cuda::CompileCuda(
        source, name, {.arch = arch, .want_ptx = true, .use_cache = false});
    ASSERT_TRUE(c.ok()) << arch << ": " << c.status();
    EXPECT_FALSE(c->cubin.empty()) << arch;
    for (const std::string& k : kernels) {
      EXPECT_NE(c->ptx.find(".entry " + k + "("), std::string::npos) << arch << " lacks " << k;
    }
  }
}

TEST(FixedKernelsNvrtcTest, NvrtcIsOpenedAtRunTimeOrExplained) {
  if (codegen::cuda::NvrtcAvailable()) {
    EXPECT_NE(codegen::cuda::NvrtcLibraryPath().find("libnvrtc"), std::string::npos)
        << codegen::cuda::NvrtcLibraryPath();
    EXPECT_EQ(codegen::cuda::NvrtcCompilerId().rfind("NVRTC ", 0), 0u);
  } else {
    EXPECT_FALSE(codegen::cuda::NvrtcUnavailableReason().empty());
  }
}

TEST(FixedKernelsNvrtcTest, CopyAndFillKernelsCompileForSm80AndSm90) {
  std::vector<std::string> kernels;
  for (const char* kind : {"copy", "fill", "copy32", "fill32"}) {
    for (int n : {1, 2, 4, 8}) kernels.push_back(std::string("sj_") + kind + "_" + std::to_string(n));
  }
  ExpectCompiles(runtime::cuda::CopyKernelSource(), "sj_fixed", kernels);
}

TEST(FixedKernelsNvrtcTest, RowKernelsCompileForSm80AndSm90) {
  std::vector<std::string> kernels;
  for (const char* k : {"one_hot"}) {
    for (const char* t : {"f32", "f64", "f16", "bf16"}) {
      kernels.push_back(std::string("sj_") + k + "_" + t);
    }
  }
  ExpectCompiles(runtime::cuda::RowKernelSource(), "sj_rows", kernels);
}

TEST(FixedKernelsNvrtcTest, RandomKernelsCompileForSm80AndSm90) {
  std::vector<std::string> kernels = {"sj_randint_i64"};
  for (const char* k : {"rand", "randn", "dropout"}) {
    for (const char* t : {"f32", "f64", "f16", "bf16"}) {
      kernels.push_back(std::string("sj_") + k + "_" + t);
    }
  }
  ExpectCompiles(runtime::cuda::RandomKernelSource(), "sj_random", kernels);
}

TEST(FixedKernelsNvrtcTest, IndexKernelsCompileForSm80AndSm90) {
  std::vector<std::string> kernels = {"sj_arange_i64", "sj_arange_i32",
                                      "sj_embedding_count", "sj_embedding_scan",
                                      "sj_embedding_place"};
  for (const char* k :
       {"embedding", "embedding_backward", "arange", "argmax", "var", "topk"}) {
    for (const char* t : {"f32", "f64", "f16", "bf16"}) {
      kernels.push_back(std::string("sj_") + k + "_" + t);
    }
  }
  ExpectCompiles(runtime::cuda::IndexKernelSource(), "sj_index", kernels);
}

TEST(FixedKernelsNvrtcTest, ConvKernelsCompileForSm80AndSm90) {
  std::vector<std::string> kernels;
  for (const char* k :
       {"conv2d", "conv2d_backward_input", "conv2d_backward_weight",
        "max_pool2d", "max_pool2d_backward", "avg_pool2d",
        "avg_pool2d_backward"}) {
    for (const char* t : {"f32", "f64", "f16", "bf16"}) {
      kernels.push_back(std::string("sj_") + k + "_" + t);
    }
  }
  ExpectCompiles(runtime::cuda::ConvKernelSource(), "sj_conv", kernels);
}

}  // namespace
}  // namespace stepjit
