// Helpers shared by the CUDA code generation tests: file reading and the
// golden fused regions in tests/ir/emit/cuda/*.ir (lit tests of the CUDA C
// stepjit-opt --emit=cuda prints for them; here, bodies to compile and run).
#ifndef STEPJIT_TESTS_CODEGEN_CUDA_TEST_UTIL_H_
#define STEPJIT_TESTS_CODEGEN_CUDA_TEST_UTIL_H_

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/dtype.h"

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

// Test-name suffix of a dtype-parameterized test ("f32", "bf16", ...).
inline std::string DTypeParamName(const testing::TestParamInfo<ir::DType>& p) {
  return std::string(ir::DTypeName(p.param));
}

}  // namespace stepjit::codegen::cuda::test

#endif  // STEPJIT_TESTS_CODEGEN_CUDA_TEST_UTIL_H_
