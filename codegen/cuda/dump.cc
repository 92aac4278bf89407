// Writing generated CUDA C and PTX for STEPJIT_DUMP.
#include "codegen/cuda/dump.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace stepjit::codegen::cuda {

namespace {

absl::Status WriteFile(const std::filesystem::path& path,
                       absl::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out)
    return absl::InternalError(absl::StrCat("cannot write kernel dump '",
                                            path.string(), "' (STEPJIT_DUMP)"));
  return absl::OkStatus();
}

}  // namespace

absl::Status DumpCudaKernel(const std::string& dir, absl::string_view kernel,
                            absl::string_view source, absl::string_view ptx) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::filesystem::path base =
      std::filesystem::path(dir) / std::string(kernel);
  if (absl::Status st = WriteFile(base.string() + ".cu", source); !st.ok())
    return st;
  if (!ptx.empty()) return WriteFile(base.string() + ".ptx", ptx);
  return absl::OkStatus();
}

absl::Status DumpRegion(const std::string& dir, const RegionSource& region,
                        const NvrtcOptions* ptx_options) {
  if (ptx_options == nullptr || !NvrtcAvailable())
    return DumpCudaKernel(dir, region.name, region.source);
  NvrtcOptions options = *ptx_options;
  options.want_ptx = true;
  absl::StatusOr<CompiledCuda> compiled =
      CompileCuda(region.source, region.name, options);
  if (!compiled.ok()) {
    if (absl::Status st = DumpCudaKernel(dir, region.name, region.source);
        !st.ok())
      return st;
    return compiled.status();
  }
  return DumpCudaKernel(dir, region.name, region.source, compiled->ptx);
}

}  // namespace stepjit::codegen::cuda
