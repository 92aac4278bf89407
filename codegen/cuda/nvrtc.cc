// NVRTC compilation with the kernel cache. libnvrtc is opened at run time
// (dlopen), so no binary links it: without the library, or in a build
// without the CUDA Toolkit's headers, NvrtcAvailable() is false.
#include "codegen/cuda/nvrtc.h"

#include <dlfcn.h>
#include <glob.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "config/env.h"
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

// The NVRTC entry points, resolved from the library found at run time.
struct NvrtcApi {
  std::string path;   // the library loaded; empty when none
  std::string error;  // why none was
  decltype(&::nvrtcGetErrorString) GetErrorString = nullptr;
  decltype(&::nvrtcVersion) Version = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) GetNumSupportedArchs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) GetSupportedArchs = nullptr;
  decltype(&::nvrtcCreateProgram) CreateProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) DestroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) CompileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) GetProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) GetProgramLog = nullptr;
  decltype(&::nvrtcGetCUBINSize) GetCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) GetCUBIN = nullptr;
  decltype(&::nvrtcGetPTXSize) GetPTXSize = nullptr;
  decltype(&::nvrtcGetPTX) GetPTX = nullptr;
};

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

// $STEPJIT_NVRTC_LIBRARY, then the loader's search path, then the toolkit
// this build was configured with.
const NvrtcApi& Api() {
  static const NvrtcApi* api = [] {
    auto* a = new NvrtcApi;
    std::vector<std::string> candidates;
    if (std::optional<std::string> env =
            config::Get(config::Env::kNvrtcLibrary))
      candidates.push_back(*std::move(env));
    for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) {
      candidates.push_back(name);
    }
    candidates.push_back(STEPJIT_NVRTC_LIBRARY);
    std::vector<std::string> tried;
    for (const std::string& c : candidates) {
      void* lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) {
        tried.push_back(dlerror());
        continue;
      }
      const bool all =
          Resolve(lib, "nvrtcGetErrorString", a->GetErrorString) &&
          Resolve(lib, "nvrtcVersion", a->Version) &&
          Resolve(lib, "nvrtcGetNumSupportedArchs", a->GetNumSupportedArchs) &&
          Resolve(lib, "nvrtcGetSupportedArchs", a->GetSupportedArchs) &&
          Resolve(lib, "nvrtcCreateProgram", a->CreateProgram) &&
          Resolve(lib, "nvrtcDestroyProgram", a->DestroyProgram) &&
          Resolve(lib, "nvrtcCompileProgram", a->CompileProgram) &&
          Resolve(lib, "nvrtcGetProgramLogSize", a->GetProgramLogSize) &&
          Resolve(lib, "nvrtcGetProgramLog", a->GetProgramLog) &&
          Resolve(lib, "nvrtcGetCUBINSize", a->GetCUBINSize) &&
          Resolve(lib, "nvrtcGetCUBIN", a->GetCUBIN) &&
          Resolve(lib, "nvrtcGetPTXSize", a->GetPTXSize) &&
          Resolve(lib, "nvrtcGetPTX", a->GetPTX);
      if (!all) {
        tried.push_back(absl::StrCat(c, ": missing NVRTC entry points"));
        *a = NvrtcApi();
        continue;
      }
      Dl_info info;
      a->path = dladdr(reinterpret_cast<void*>(a->Version), &info) != 0 && info.dli_fname
                    ? info.dli_fname
                    : c;
      return a;
    }
    a->error = absl::StrCat("cannot load libnvrtc (", absl::StrJoin(tried, "; "), ")");
    return a;
  }();
  return *api;
}

absl::Status Internal(nvrtcResult r, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("NVRTC ", what, ": ", Api().GetErrorString(r)));
}

// Runs NVRTC once; fills cubin, ptx (if asked) and log.
absl::Status RunNvrtc(absl::string_view source, absl::string_view name,
                      absl::string_view arch, bool want_ptx,
                      CompiledCuda& out) {
  const std::string src(source), file = absl::StrCat(name, ".cu");
  nvrtcProgram prog = nullptr;
  if (nvrtcResult r = Api().CreateProgram(&prog, src.c_str(), file.c_str(), 0,
                                         nullptr, nullptr);
      r != NVRTC_SUCCESS) {
    return Internal(r, "cannot create a program");
  }
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { Api().DestroyProgram(p); }
  } destroy{&prog};
  const std::vector<std::string> flags = NvrtcFlags(arch);
  std::vector<const char*> argv;
  for (const std::string& f : flags) argv.push_back(f.c_str());
  const nvrtcResult compiled =
      Api().CompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  if (Api().GetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS &&
      log_size > 1) {
    out.log.resize(log_size);
    if (Api().GetProgramLog(prog, out.log.data()) != NVRTC_SUCCESS)
      out.log.clear();
    while (!out.log.empty() &&
           (out.log.back() == '\0' || out.log.back() == '\n'))
      out.log.pop_back();
  }
  if (compiled == NVRTC_ERROR_COMPILATION ||
      compiled == NVRTC_ERROR_INVALID_OPTION) {
    return absl::InvalidArgumentError(
        absl::StrCat(NvrtcCompilerId(), " cannot compile ", file, " for ", arch,
                     " (", Api().GetErrorString(compiled), "):\n", out.log));
  }
  if (compiled != NVRTC_SUCCESS)
    return Internal(compiled, absl::StrCat("compiling ", file));
  size_t size = 0;
  if (nvrtcResult r = Api().GetCUBINSize(prog, &size); r != NVRTC_SUCCESS)
    return Internal(r, "cubin size");
  out.cubin.resize(size);
  if (nvrtcResult r = Api().GetCUBIN(prog, out.cubin.data()); r != NVRTC_SUCCESS)
    return Internal(r, "cubin");
  if (out.cubin.empty())
    return absl::InternalError(
        absl::StrCat("NVRTC produced no cubin for ", arch));
  if (want_ptx) {
    if (nvrtcResult r = Api().GetPTXSize(prog, &size); r != NVRTC_SUCCESS)
      return Internal(r, "PTX size");
    out.ptx.resize(size);
    if (nvrtcResult r = Api().GetPTX(prog, out.ptx.data()); r != NVRTC_SUCCESS)
      return Internal(r, "PTX");
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }
  return absl::OkStatus();
}

#endif  // STEPJIT_HAVE_NVRTC

}  // namespace

#ifdef STEPJIT_HAVE_NVRTC

bool NvrtcConfigured() { return true; }
bool NvrtcAvailable() { return !Api().path.empty(); }
std::string NvrtcLibraryPath() { return Api().path; }
std::string NvrtcUnavailableReason() { return Api().error; }

std::string NvrtcCompilerId() {
  if (!NvrtcAvailable()) return "NVRTC unavailable";
  int major = 0, minor = 0;
  if (Api().Version(&major, &minor) != NVRTC_SUCCESS) return "NVRTC unknown";
  return absl::StrCat("NVRTC ", major, ".", minor);
}

std::vector<std::string> NvrtcSupportedArchs() {
  if (!NvrtcAvailable()) return {};
  int n = 0;
  if (Api().GetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return {};
  std::vector<int> archs(static_cast<size_t>(n));
  if (Api().GetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return {};
  std::vector<std::string> out;
  for (int a : archs) out.push_back(absl::StrCat("sm_", a));
  return out;
}

std::vector<std::string> NvrtcFlags(absl::string_view arch) {
  std::vector<std::string> flags = {absl::StrCat("--gpu-architecture=", arch),
                                    "--std=c++17", "--fmad=false"};
  if (const CudaHeaders& h = FoundCudaHeaders(); !h.dir.empty())
    flags.push_back(absl::StrCat("-I", h.dir));
  return flags;
}

#else

bool NvrtcConfigured() { return false; }
bool NvrtcAvailable() { return false; }
std::string NvrtcLibraryPath() { return ""; }
std::string NvrtcUnavailableReason() {
  return "this build has no NVRTC headers (configure with the CUDA Toolkit "
         "installed, "
         "or with STEPJIT_NVRTC_ROOT as scripts/setup does)";
}
std::string NvrtcCompilerId() { return "NVRTC unavailable"; }
std::vector<std::string> NvrtcSupportedArchs() { return {}; }
std::vector<std::string> NvrtcFlags(absl::string_view arch) {
  return {absl::StrCat("--gpu-architecture=", arch), "--std=c++17",
          "--fmad=false"};
}

#endif  // STEPJIT_HAVE_NVRTC

std::vector<std::string> CudaInstallRoots() {
  std::vector<std::string> roots;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* root = std::getenv(var); root != nullptr && *root)
      roots.push_back(root);
  }
  roots.push_back("/usr/local/cuda");
  return roots;
}

std::vector<std::string> VirtualEnvSitePackages() {
  std::vector<std::string> out;
  const char* venv = std::getenv("VIRTUAL_ENV");
  if (venv == nullptr || *venv == '\0') return out;
  const std::string pattern = absl::StrCat(venv, "/lib/python3*/site-packages");
  glob_t g;
  if (glob(pattern.c_str(), GLOB_ONLYDIR, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

std::vector<std::string> CudaHeaderCandidates() {
  std::vector<std::string> out;
  if (std::optional<std::string> env = config::Get(config::Env::kCudaInclude))
    out.push_back(*std::move(env));
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const std::string nvrtc = NvrtcLibraryPath(); !nvrtc.empty()) {
    const fs::path lib = fs::weakly_canonical(nvrtc, ec).parent_path();
    out.push_back((lib.parent_path() / "include").string());
  }
  if (const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
      !ec && !exe.empty()) {
    out.push_back((exe.parent_path().parent_path() / "include").string());
  }
  for (const std::string& root : CudaInstallRoots())
    out.push_back(absl::StrCat(root, "/include"));
  for (const std::string& site : VirtualEnvSitePackages())
    out.push_back(absl::StrCat(site, "/nvidia/cu13/include"));
#ifdef STEPJIT_CUDA_INCLUDE_DIR
  out.push_back(STEPJIT_CUDA_INCLUDE_DIR);
#endif
  // The first place of each directory named twice.
  absl::flat_hash_set<std::string> seen;
  std::vector<std::string> unique;
  for (std::string& c : out)
    if (seen.insert(c).second) unique.push_back(std::move(c));
  return unique;
}

CudaHeaders FindCudaHeaders(const std::vector<std::string>& candidates) {
  CudaHeaders out;
  std::vector<std::string> why;
  for (const std::string& dir : candidates) {
    out.tried.push_back(dir);
    std::vector<std::string> missing;
    for (const char* header : {"cuda_fp16.h", "cuda_bf16.h"}) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / header,
                                            ec))
        missing.push_back(header);
    }
    if (missing.empty()) {
      out.dir = dir;
      return out;
    }
    why.push_back(
        absl::StrCat(dir, " (no ", absl::StrJoin(missing, ", no "), ")"));
  }
  out.error = absl::StrCat(
      "the CUDA headers the kernels include (cuda_fp16.h, cuda_bf16.h) are "
      "in none of the places looked at: ",
      why.empty() ? "none" : absl::StrJoin(why, "; "),
      ". Set STEPJIT_CUDA_INCLUDE to a directory that has them (a CUDA "
      "Toolkit's include/, or the nvidia/cu13/include of the "
      "nvidia-cuda-runtime and nvidia-cuda-crt wheels)");
  return out;
}

const CudaHeaders& FoundCudaHeaders() {
  static const CudaHeaders* found =
      new CudaHeaders(FindCudaHeaders(CudaHeaderCandidates()));
  return *found;
}

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
        absl::StrCat("cannot compile ", name, ": ", NvrtcUnavailableReason()));
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
  if ((absl::StrContains(source, "cuda_fp16.h") ||
       absl::StrContains(source, "cuda_bf16.h")) &&
      FoundCudaHeaders().dir.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot compile ", name, ": ", FoundCudaHeaders().error));
  }
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
