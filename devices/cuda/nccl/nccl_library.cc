// LoadNccl: finds and opens NCCL, resolves its entry points, and turns its
// result codes into absl statuses.
#include "devices/cuda/nccl/nccl_library.h"

#include <dlfcn.h>
#include <glob.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/nvrtc.h"
#include "config/env.h"
#include "devices/cuda/dl_library.h"
#include "ir/status.h"

// The mirrored ABI is checked against NCCL's own header where the toolkit
// has one (NVIDIA's CUDA 13 toolkit images and the nvidia-nccl wheels ship
// nccl.h; the NVRTC wheels do not).
#if defined(STEPJIT_HAVE_NVRTC) && __has_include(<nccl.h>)
#define STEPJIT_CHECK_NCCL_ABI 1
#include <nccl.h>
#endif

namespace stepjit::runtime::cuda {

namespace {

#ifdef STEPJIT_CHECK_NCCL_ABI
static_assert(sizeof(nccl::UniqueId) == sizeof(ncclUniqueId));
static_assert(nccl::kUniqueIdBytes == NCCL_UNIQUE_ID_BYTES);
static_assert(sizeof(nccl::Result) == sizeof(ncclResult_t));
static_assert(sizeof(nccl::DataType) == sizeof(ncclDataType_t));
static_assert(sizeof(nccl::RedOp) == sizeof(ncclRedOp_t));
static_assert(sizeof(nccl::Comm) == sizeof(ncclComm_t));
static_assert(nccl::kSuccess == ncclSuccess);
static_assert(nccl::kUnhandledCudaError == ncclUnhandledCudaError);
static_assert(nccl::kSystemError == ncclSystemError);
static_assert(nccl::kInternalError == ncclInternalError);
static_assert(nccl::kInvalidArgument == ncclInvalidArgument);
static_assert(nccl::kInvalidUsage == ncclInvalidUsage);
static_assert(nccl::kRemoteError == ncclRemoteError);
static_assert(nccl::kInProgress == ncclInProgress);
static_assert(nccl::kInt8 == ncclInt8 && nccl::kUint8 == ncclUint8);
static_assert(nccl::kInt32 == ncclInt32 && nccl::kUint32 == ncclUint32);
static_assert(nccl::kInt64 == ncclInt64 && nccl::kUint64 == ncclUint64);
static_assert(nccl::kFloat16 == ncclFloat16 && nccl::kBfloat16 == ncclBfloat16);
static_assert(nccl::kFloat32 == ncclFloat32 && nccl::kFloat64 == ncclFloat64);
static_assert(nccl::kSum == ncclSum && nccl::kProd == ncclProd);
static_assert(nccl::kMax == ncclMax && nccl::kMin == ncclMin);
static_assert(nccl::kAvg == ncclAvg);
#endif

constexpr char kLibraryName[] = "libnccl.so.2";
constexpr char kInstallHint[] =
    "install it with `pip install nvidia-nccl-cu13` (into the project's "
    ".venv-cuda or an activated virtual environment), or with the CUDA "
    "installation (NVIDIA's libnccl2 package), or point STEPJIT_NCCL_LIBRARY "
    "at libnccl.so.2";

void AddGlob(const std::string& pattern, std::vector<std::string>& out) {
  glob_t g;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  }
  globfree(&g);
}

// The wheel's library under a site-packages directory.
std::string WheelLibrary(const std::string& site_packages) {
  return absl::StrCat(site_packages, "/nvidia/nccl/lib/", kLibraryName);
}

absl::StatusOr<NcclLibrary*> Open() {
  ASSIGN_OR_RETURN(
      const DlOpened opened,
      DlOpenFirstOrNotFound(
          NcclCandidates(),
          absl::StrCat("NCCL not found", config::Get(config::Env::kNcclLibrary)
                                             ? " at STEPJIT_NCCL_LIBRARY"
                                             : ""),
          absl::StrCat(". NCCL runs collectives of CUDA tensors; ",
                       kInstallHint,
                       ". Without it they copy through the host "
                       "(docs/nccl.md).")));
  void* lib = opened.handle;
  const std::string& path = opened.path;
  auto* out = new NcclLibrary;
  nccl::Api& api = out->api;
  const DlSymbol symbols[] = {
      {"ncclGetVersion", DlResolve(lib, "ncclGetVersion", api.GetVersion)},
      {"ncclGetUniqueId", DlResolve(lib, "ncclGetUniqueId", api.GetUniqueId)},
      {"ncclCommInitRank",
       DlResolve(lib, "ncclCommInitRank", api.CommInitRank)},
      {"ncclCommDestroy", DlResolve(lib, "ncclCommDestroy", api.CommDestroy)},
      {"ncclCommAbort", DlResolve(lib, "ncclCommAbort", api.CommAbort)},
      {"ncclCommGetAsyncError",
       DlResolve(lib, "ncclCommGetAsyncError", api.CommGetAsyncError)},
      {"ncclGetErrorString",
       DlResolve(lib, "ncclGetErrorString", api.GetErrorString)},
      {"ncclAllReduce", DlResolve(lib, "ncclAllReduce", api.AllReduce)},
      {"ncclBroadcast", DlResolve(lib, "ncclBroadcast", api.Broadcast)},
      {"ncclAllGather", DlResolve(lib, "ncclAllGather", api.AllGather)},
      {"ncclGroupStart", DlResolve(lib, "ncclGroupStart", api.GroupStart)},
      {"ncclGroupEnd", DlResolve(lib, "ncclGroupEnd", api.GroupEnd)},
  };
  if (const char* missing = DlFirstMissing(symbols)) {
    delete out;
    dlclose(lib);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " has no ", missing,
                     "; stepjit needs NCCL 2.10 or newer: ", kInstallHint));
  }
  Dl_info info;
  out->path = dladdr(reinterpret_cast<void*>(api.GetVersion), &info) != 0 &&
                      info.dli_fname != nullptr
                  ? info.dli_fname
                  : path;
  if (nccl::Result r = api.GetVersion(&out->version); r != nccl::kSuccess) {
    const absl::Status s = NcclStatus(*out, r, "ncclGetVersion");
    delete out;
    return s;
  }
  if (out->version < nccl::kVersionWithAvg) {
    const absl::Status s = absl::FailedPreconditionError(absl::StrCat(
        out->path, " is NCCL ", out->VersionString(),
        "; stepjit needs 2.10 or newer (ncclAvg, bfloat16): ", kInstallHint));
    delete out;
    return s;
  }
  return out;
}

}  // namespace

std::string NcclLibrary::VersionString() const {
  // Before 2.9 the code was major * 1000 + minor * 100 + patch.
  const int major = version >= 10000 ? version / 10000 : version / 1000;
  const int minor = version >= 10000 ? version / 100 % 100 : version / 100 % 10;
  const int patch = version % 100;
  return absl::StrCat(major, ".", minor, ".", patch);
}

std::vector<std::string> NcclCandidates() {
  if (std::optional<std::string> env = config::Get(config::Env::kNcclLibrary))
    return {*std::move(env)};
  std::vector<std::string> out = {kLibraryName};
  for (const std::string& root : codegen::cuda::CudaInstallRoots()) {
    for (const char* lib : {"/lib64/", "/lib/"})
      out.push_back(absl::StrCat(root, lib, kLibraryName));
  }
  // The NVRTC this binary loaded: its folder, and for a wheel
  // (<site-packages>/nvidia/cu13/lib/libnvrtc.so.13) the NCCL wheel beside it.
  if (std::string nvrtc = codegen::cuda::NvrtcLibraryPath(); !nvrtc.empty()) {
    const std::string dir = nvrtc.substr(0, nvrtc.find_last_of('/') + 1);
    if (!dir.empty()) out.push_back(absl::StrCat(dir, kLibraryName));
    if (const size_t at = nvrtc.rfind("/nvidia/"); at != std::string::npos) {
      out.push_back(WheelLibrary(nvrtc.substr(0, at)));
    }
  }
  for (const std::string& site : codegen::cuda::VirtualEnvSitePackages())
    AddGlob(WheelLibrary(site), out);
#ifdef STEPJIT_SOURCE_DIR
  AddGlob(
      WheelLibrary(STEPJIT_SOURCE_DIR "/.venv-cuda/lib/python3*/site-packages"),
      out);
#endif
  std::vector<std::string> unique;
  for (std::string& c : out) {
    if (std::find(unique.begin(), unique.end(), c) == unique.end())
      unique.push_back(std::move(c));
  }
  return unique;
}

absl::StatusOr<const NcclLibrary*> LoadNccl() {
  static const absl::StatusOr<NcclLibrary*>* const library =
      new absl::StatusOr<NcclLibrary*>(Open());
  if (!library->ok()) return library->status();
  return **library;
}

absl::StatusOr<std::unique_ptr<const NcclLibrary>> LoadNcclUncached() {
  ASSIGN_OR_RETURN(NcclLibrary * lib, Open());
  return std::unique_ptr<const NcclLibrary>(lib);
}

absl::Status NcclStatus(const NcclLibrary& lib, nccl::Result result,
                        absl::string_view call) {
  if (result == nccl::kSuccess) return absl::OkStatus();
  const char* text = lib.api.GetErrorString != nullptr
                         ? lib.api.GetErrorString(result)
                         : nullptr;
  const std::string message =
      absl::StrCat(call, ": ", text != nullptr ? text : "NCCL error",
                   " (ncclResult ", result, ")");
  switch (result) {
    case nccl::kInvalidArgument:
    case nccl::kInvalidUsage:
      return absl::InvalidArgumentError(message);
    case nccl::kRemoteError:
    case nccl::kSystemError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace stepjit::runtime::cuda
