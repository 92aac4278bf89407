// NVRTC compilation with the kernel cache; stubs when the build has no NVRTC.
#include "codegen/cuda/nvrtc.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "ir/status.h"

#ifdef STEPJIT_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace stepjit::codegen::cuda {

namespace {

// "sm_90", "sm_90a", "sm_100f": a real architecture, nothing NVRTC could
// read as another option.
bool IsRealArch(absl::string_view arch) {
  if (!absl::ConsumePrefix(&arch, "sm_") || arch.empty()) return false;
  if (arch.back() == 'a' || arch.back() == 'f') arch.remove_suffix(1);
  return !arch.empty() && arch.size() <= 3 &&
         std::all_of(arch.begin(), arch.end(),
                     [](char c) { return absl::ascii_isdigit(c); });
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

#ifdef STEPJIT_HAVE_NVRTC

absl::Status Internal(nvrtcResult r, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("NVRTC ", what, ": ", nvrtcGetErrorString(r)));
}

// Runs NVRTC once; fills cubin, ptx (if asked) and log.
absl::Status RunNvrtc(absl::string_view source, absl::string_view name,
                      absl::string_view arch, bool want_ptx,
                      CompiledCuda& out) {
  const std::string src(source), file = absl::StrCat(name, ".cu");
  nvrtcProgram prog = nullptr;
  if (nvrtcResult r = nvrtcCreateProgram(&prog, src.c_str(), file.c_str(), 0,
                                         nullptr, nullptr);
      r != NVRTC_SUCCESS) {
    return Internal(r, "cannot create a program");
  }
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&prog};
  const std::vector<std::string> flags = NvrtcFlags(arch);
  std::vector<const char*> argv;
  for (const std::string& f : flags) argv.push_back(f.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS &&
      log_size > 1) {
    out.log.resize(log_size);
    if (nvrtcGetProgramLog(prog, out.log.data()) != NVRTC_SUCCESS)
      out.log.clear();
    while (!out.log.empty() &&
           (out.log.back() == '\0' || out.log.back() == '\n'))
      out.log.pop_back();
  }
  if (compiled == NVRTC_ERROR_COMPILATION ||
      compiled == NVRTC_ERROR_INVALID_OPTION) {
    return absl::InvalidArgumentError(
        absl::StrCat(NvrtcCompilerId(), " cannot compile ", file, " for ", arch,
                     " (", nvrtcGetErrorString(compiled), "):\n", out.log));
  }
  if (compiled != NVRTC_SUCCESS)
    return Internal(compiled, absl::StrCat("compiling ", file));
  size_t size = 0;
  if (nvrtcResult r = nvrtcGetCUBINSize(prog, &size); r != NVRTC_SUCCESS)
    return Internal(r, "cubin size");
  out.cubin.resize(size);
  if (nvrtcResult r = nvrtcGetCUBIN(prog, out.cubin.data()); r != NVRTC_SUCCESS)
    return Internal(r, "cubin");
  if (out.cubin.empty())
    return absl::InternalError(
        absl::StrCat("NVRTC produced no cubin for ", arch));
  if (want_ptx) {
    if (nvrtcResult r = nvrtcGetPTXSize(prog, &size); r != NVRTC_SUCCESS)
      return Internal(r, "PTX size");
    out.ptx.resize(size);
    if (nvrtcResult r = nvrtcGetPTX(prog, out.ptx.data()); r != NVRTC_SUCCESS)
      return Internal(r, "PTX");
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }
  return absl::OkStatus();
}

#endif  // STEPJIT_HAVE_NVRTC

}  // namespace

#ifdef STEPJIT_HAVE_NVRTC

bool NvrtcAvailable() { return true; }

std::string NvrtcCompilerId() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "NVRTC unknown";
  return absl::StrCat("NVRTC ", major, ".", minor);
}

std::vector<std::string> NvrtcSupportedArchs() {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return {};
  std::vector<int> archs(static_cast<size_t>(n));
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return {};
  std::vector<std::string> out;
  for (int a : archs) out.push_back(absl::StrCat("sm_", a));
  return out;
}

std::vector<std::string> NvrtcFlags(absl::string_view arch) {
  return {absl::StrCat("--gpu-architecture=", arch), "--std=c++17",
          "--fmad=false", absl::StrCat("-I", STEPJIT_CUDA_INCLUDE_DIR)};
}

#else

bool NvrtcAvailable() { return false; }
std::string NvrtcCompilerId() { return "NVRTC unavailable"; }
std::vector<std::string> NvrtcSupportedArchs() { return {}; }
std::vector<std::string> NvrtcFlags(absl::string_view arch) {
  return {absl::StrCat("--gpu-architecture=", arch), "--std=c++17",
          "--fmad=false"};
}

#endif  // STEPJIT_HAVE_NVRTC

absl::StatusOr<CompiledCuda> CompileCuda(absl::string_view source,
                                         absl::string_view name,
                                         const NvrtcOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!IsRealArch(options.arch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", options.arch,
        "' is not a real GPU architecture such as sm_80 or sm_90"));
  }
  if (!NvrtcAvailable()) {
    return absl::UnimplementedError(
        absl::StrCat("cannot compile ", name,
                     ": this build has no NVRTC (configure with the CUDA "
                     "Toolkit installed)"));
  }
  KernelCache& cache =
      options.cache != nullptr ? *options.cache : KernelCache::Global();
  const std::string flags = absl::StrJoin(NvrtcFlags(options.arch), " ");
  const CacheKey cubin_key{std::string(source), NvrtcCompilerId(), options.arch,
                           absl::StrCat(flags, ";cubin")};
  const CacheKey ptx_key{std::string(source), NvrtcCompilerId(), options.arch,
                         absl::StrCat(flags, ";ptx")};
  CompiledCuda out;
  if (options.use_cache) {
    std::optional<std::string> cubin = cache.Lookup(cubin_key);
    std::optional<std::string> ptx =
        cubin && options.want_ptx ? cache.Lookup(ptx_key) : std::nullopt;
    if (cubin && (ptx || !options.want_ptx)) {
      out.cubin = *std::move(cubin);
      if (ptx) out.ptx = *std::move(ptx);
      out.cache_hit = true;
      out.compile_ms = MsSince(t0);
      return out;
    }
  }
#ifdef STEPJIT_HAVE_NVRTC
  RETURN_IF_ERROR(RunNvrtc(source, name, options.arch, options.want_ptx, out));
#endif
  if (options.use_cache) {
    cache.Store(cubin_key, out.cubin);
    if (options.want_ptx) cache.Store(ptx_key, out.ptx);
  }
  out.compile_ms = MsSince(t0);
  return out;
}

}  // namespace stepjit::codegen::cuda
