// Host emulation of CUDA kernels: the host compile through the kernel cache,
// loading the module, and launching its kernels on the fiber scheduler.
#include "testing/cuda_emulator/host_emulation.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/kernel_cache.h"
#include "ir/status.h"
#include "testing/cuda_emulator/host_emulation_header.h"
#include "testing/cuda_emulator/host_fibers.h"

namespace stepjit::codegen::cuda {

struct HostKernelEntry {
  std::string name;
  abi::sj_kernel_desc desc;
  HostModuleState* module;
};

struct HostModuleState : std::enable_shared_from_this<HostModuleState> {
  std::string name;
  void* handle = nullptr;
  absl::flat_hash_map<std::string, std::unique_ptr<HostKernelEntry>> kernels;
  ~HostModuleState() {
    if (handle != nullptr) dlclose(handle);
  }
};

namespace {

namespace fs = std::filesystem;

constexpr int kMaxBlock = 1024;
constexpr size_t kMaxLogChars = 4000;

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// Runs `argv` with stdout and stderr to `log`; the exit status, or -1.
int RunCommand(const std::vector<std::string>& argv, const fs::path& log) {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int err =
      posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A private scratch directory, removed with its contents.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::string tmpl =
        (fs::temp_directory_path() / "stepjit_emu_XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) path = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// The compiler's `--version` first line, so an upgrade misses the cache.
const std::string& CompilerIdentity() {
  static const std::string* id = [] {
    ScratchDir dir;
    std::string first_line = HostCompiler();
    if (!dir.path.empty() &&
        RunCommand({HostCompiler(), "--version"}, dir.path / "version") == 0) {
      std::string v = ReadAll(dir.path / "version");
      first_line = absl::StrCat(HostCompiler(), " ", v.substr(0, v.find('\n')));
    }
    return new std::string(first_line);
  }();
  return *id;
}

std::vector<std::string> CompileFlags() {
  std::vector<std::string> flags = {"-std=c++20", "-O1",
                                    "-fPIC",      "-shared",
                                    "-pthread",   "-ffp-contract=off",
                                    "-w",         "-fvisibility=hidden"};
  // GCC makes statics of inline functions process-wide unique symbols,
  // which would be shared between modules and keep them from unloading.
  if (CompilerIdentity().find("clang") == std::string::npos)
    flags.push_back("-fno-gnu-unique");
  return flags;
}

std::string Machine() {
  utsname u;
  return uname(&u) == 0 ? std::string(u.machine) : "unknown";
}

}  // namespace

const std::string& HostCompiler() {
  static const std::string* compiler = [] {
    std::vector<std::string> dirs;
    if (const char* path = std::getenv("PATH")) {
      std::stringstream s(path);
      for (std::string d; std::getline(s, d, ':');) {
        if (!d.empty()) dirs.push_back(d);
      }
    }
    dirs.push_back("/usr/bin");
    for (const char* name : {"c++", "g++", "clang++"}) {
      for (const std::string& d : dirs) {
        const fs::path p = fs::path(d) / name;
        if (access(p.c_str(), X_OK) == 0)
          return new std::string(fs::absolute(p).string());
      }
    }
    return new std::string();
  }();
  return *compiler;
}

const std::string& HostKernel::name() const { return entry_->name; }
size_t HostKernel::arg_bytes() const { return entry_->desc.arg_bytes; }
size_t HostKernel::arg_align() const { return entry_->desc.arg_align; }

void HostKernel::PackArgs(void* const* args, void* out) const {
  entry_->desc.pack(args, out);
}

absl::Status HostKernel::Run(const void* packed_args, int64_t grid,
                             int block) const {
  if (grid < 1 || grid > UINT32_MAX || block < 1 || block > kMaxBlock) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host emulation: cannot launch ", entry_->name, " with ", grid,
        " blocks of ", block, " threads (1..", kMaxBlock, " per block)"));
  }
  return RunOnFibers(entry_->desc, entry_->name, packed_args,
                     static_cast<unsigned>(grid), static_cast<unsigned>(block));
}

absl::Status HostKernel::Launch(void* const* args, int64_t grid,
                                int block) const {
  std::vector<std::max_align_t> packed(arg_bytes() / sizeof(std::max_align_t) +
                                       1);
  PackArgs(args, packed.data());
  return Run(packed.data(), grid, block);
}

std::shared_ptr<const void> HostKernel::KeepLoaded() const {
  return entry_->module->shared_from_this();
}

const std::string& HostModule::name() const { return state_->name; }

absl::StatusOr<HostKernel> HostModule::Kernel(absl::string_view name) const {
  auto it = state_->kernels.find(name);
  if (it == state_->kernels.end()) {
    return absl::NotFoundError(
        absl::StrCat("host module ", state_->name, " has no kernel ", name));
  }
  return HostKernel(it->second.get());
}

absl::StatusOr<HostModule> CompileForHost(
    absl::string_view source, absl::string_view name,
    const std::vector<std::string>& kernel_names) {
  if (HostCompiler().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no host C++ compiler (c++, g++ or clang++ on PATH) to build the CUDA "
        "emulation of ",
        name));
  }
  std::vector<std::string> kernels;
  std::string unit = absl::StrCat(source, "\n// host emulation entry points\n");
  for (const std::string& k : kernel_names) {
    if (!IsIdentifier(k)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel name '", k, "' of ", name, " is not a C identifier"));
    }
    if (std::find(kernels.begin(), kernels.end(), k) != kernels.end()) continue;
    kernels.push_back(k);
    absl::StrAppend(&unit, "SJ_EXPORT void sj_describe_", k,
                    "(sj_kernel_desc* d) { sj_kernel<", k,
                    ">::describe(d); }\n");
  }
  const std::vector<std::string> flags = CompileFlags();
  const CacheKey key{
      absl::StrCat(HostEmulationHeader(), "\n", unit), CompilerIdentity(),
      absl::StrCat("host-emulation-", Machine()), absl::StrJoin(flags, " ")};
  ScratchDir dir;
  if (dir.path.empty()) {
    return absl::InternalError(
        absl::StrCat("cannot create a scratch directory under ",
                     fs::temp_directory_path().string(), " to build ", name));
  }
  const fs::path lib = dir.path / "module.so";
  std::optional<std::string> blob = KernelCache::Global().Lookup(key);
  if (blob.has_value()) {
    std::ofstream(lib, std::ios::binary) << *blob;
  } else {
    std::ofstream(dir.path / "sj_emulation.h") << HostEmulationHeader();
    std::ofstream(dir.path / "cuda_fp16.h") << "";
    std::ofstream(dir.path / "cuda_bf16.h") << "";
    std::ofstream(dir.path / "cuda_runtime.h") << "";
    std::ofstream(dir.path / "module.cu") << unit;
    std::vector<std::string> argv = {HostCompiler()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(),
                {"-I", dir.path.string(), "-include", "sj_emulation.h", "-x",
                 "c++", (dir.path / "module.cu").string(), "-o", lib.string()});
    const int rc = RunCommand(argv, dir.path / "log");
    if (rc != 0) {
      const std::string log = ReadAll(dir.path / "log");
      return absl::InvalidArgumentError(
          absl::StrCat("host compile of ", name, " failed (", HostCompiler(),
                       ", exit ", rc, "):\n", log.substr(0, kMaxLogChars),
                       log.size() > kMaxLogChars ? "\n[log truncated]" : ""));
    }
    KernelCache::Global().Store(key, ReadAll(lib));
  }
  auto state = std::make_shared<HostModuleState>();
  state->name = std::string(name);
  state->handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (state->handle == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot load the host module ", name, ": ", dlerror()));
  }
  for (const std::string& k : kernels) {
    using Describe = void (*)(abi::sj_kernel_desc*);
    auto describe = reinterpret_cast<Describe>(
        dlsym(state->handle, absl::StrCat("sj_describe_", k).c_str()));
    if (describe == nullptr) {
      return absl::InternalError(
          absl::StrCat("host module ", name, " lacks the entry of ", k));
    }
    auto entry = std::make_unique<HostKernelEntry>();
    entry->name = k;
    describe(&entry->desc);
    entry->module = state.get();
    SJ_CHECK(entry->desc.arg_align <= alignof(std::max_align_t), k);
    state->kernels[k] = std::move(entry);
  }
  return HostModule(std::move(state));
}

}  // namespace stepjit::codegen::cuda
