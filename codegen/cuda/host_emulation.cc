// Host emulation of CUDA kernels: the built-ins header, the host compile
// through the kernel cache, and the fiber scheduler that runs a block.
#include "codegen/cuda/host_emulation.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/kernel_cache.h"
#include "ir/status.h"

#if defined(__SANITIZE_ADDRESS__)
#define SJ_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SJ_FIBER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define SJ_FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SJ_FIBER_TSAN 1
#endif
#endif
#ifdef SJ_FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef SJ_FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

// The C interface between this file and a compiled module, written once:
// compiled here and pasted as text into the emulation header.
#define SJ_EMULATION_ABI                                                 \
  struct sj_thread_ctx {                                                 \
    unsigned thread, block, block_dim, grid_dim;                         \
  };                                                                     \
  struct sj_host_api {                                                   \
    void* team;                                                          \
    void (*sync_block)(void* team);                                      \
    unsigned long long (*exchange)(void* team, unsigned long long value, \
                                   int src_lane);                        \
  };                                                                     \
  struct sj_kernel_desc {                                                \
    unsigned long long arg_bytes, arg_align;                             \
    void (*pack)(void* const* args, void* out);                          \
    void (*run)(const void* packed, const sj_thread_ctx* thread,         \
                const sj_host_api* api);                                 \
  };
#define SJ_TEXT(...) #__VA_ARGS__
#define SJ_EXPANDED_TEXT(x) SJ_TEXT(x)

namespace stepjit::codegen::cuda {

namespace abi {
SJ_EMULATION_ABI
}  // namespace abi

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

constexpr char kHeaderStart[] =
    R"(// stepjit host emulation of the CUDA built-ins.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static  // blocks run one after another
#define __constant__ static
#define SJ_EXPORT extern "C" __attribute__((visibility("default")))
)";

constexpr char kHeaderEnd[] = R"(
struct sj_dim3 { unsigned x, y, z; };
static sj_dim3 threadIdx{0, 0, 0}, blockIdx{0, 0, 0};
static sj_dim3 blockDim{1, 1, 1}, gridDim{1, 1, 1};
static const int warpSize = 32;
static const sj_host_api* sj_api;
// The other threads of the block run while this one waits: restore its index.
static inline void __syncthreads() {
  const unsigned t = threadIdx.x;
  sj_api->sync_block(sj_api->team);
  threadIdx.x = t;
}
static inline unsigned long long sj_exchange(unsigned long long v, int src_lane) {
  const unsigned t = threadIdx.x;
  v = sj_api->exchange(sj_api->team, v, src_lane);
  threadIdx.x = t;
  return v;
}
static inline void __syncwarp(unsigned = 0xffffffffu) { sj_exchange(0, -1); }
static inline unsigned __activemask() { return 0xffffffffu; }
// Lane `src` of this warp's value, or this lane's own for src < 0.
template <class T>
static inline T sj_shfl(T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof v);
  bits = sj_exchange(bits, src);
  T r;
  memcpy(&r, &bits, sizeof r);
  return r;
}
static inline int sj_lane() { return (int)(threadIdx.x & 31u); }
template <class T>
static inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
  return sj_shfl(v, (sj_lane() & ~(width - 1)) + (src & (width - 1)));
}
template <class T>
static inline T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  const int lane = sj_lane();
  return sj_shfl(v, (lane & (width - 1)) + (int)delta < width ? lane + (int)delta : -1);
}
template <class T>
static inline T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  const int lane = sj_lane();
  return sj_shfl(v, (lane & (width - 1)) >= (int)delta ? lane - (int)delta : -1);
}
template <class T>
static inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  const int lane = sj_lane(), src = lane ^ mask;
  return sj_shfl(v, (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : -1);
}
// Threads of a block never run at the same time: plain updates are atomic.
template <class T>
static inline T atomicAdd(T* p, std::type_identity_t<T> v) { T old = *p; *p = old + v; return old; }
template <class T>
static inline T atomicSub(T* p, std::type_identity_t<T> v) { T old = *p; *p = old - v; return old; }
template <class T>
static inline T atomicExch(T* p, std::type_identity_t<T> v) { T old = *p; *p = v; return old; }
template <class T>
static inline T atomicMax(T* p, std::type_identity_t<T> v) { T old = *p; if (v > old) *p = v; return old; }
template <class T>
static inline T atomicMin(T* p, std::type_identity_t<T> v) { T old = *p; if (v < old) *p = v; return old; }
template <class T>
static inline T atomicCAS(T* p, std::type_identity_t<T> cmp, std::type_identity_t<T> v) {
  T old = *p; if (old == cmp) *p = v; return old;
}
static inline void __threadfence() {}
static inline void __threadfence_block() {}
template <class T>
static inline T __ldg(const T* p) { return *p; }
static inline float sj_fmin(float a, float b) { return fminf(a, b); }
static inline double sj_fmin(double a, double b) { return fmin(a, b); }
static inline float sj_fmax(float a, float b) { return fmaxf(a, b); }
static inline double sj_fmax(double a, double b) { return fmax(a, b); }
template <class A, class B>
static inline std::common_type_t<A, B> min(A a, B b) {
  using R = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<R>) return sj_fmin((R)a, (R)b);
  else return (R)b < (R)a ? (R)b : (R)a;
}
template <class A, class B>
static inline std::common_type_t<A, B> max(A a, B b) {
  using R = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<R>) return sj_fmax((R)a, (R)b);
  else return (R)a < (R)b ? (R)b : (R)a;
}
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }
static inline long long __double_as_longlong(double x) { long long d; memcpy(&d, &x, 8); return d; }
static inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
static inline int __float_as_int(float x) { int f; memcpy(&f, &x, 4); return f; }
static inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
static inline unsigned __float_as_uint(float x) { unsigned f; memcpy(&f, &x, 4); return f; }
struct __half { _Float16 v; };
static inline float __half2float(__half h) { return (float)h.v; }
static inline __half __float2half_rn(float f) { return __half{(_Float16)f}; }
static inline __half __float2half(float f) { return __float2half_rn(f); }
struct __nv_bfloat16 { uint16_t bits; };
static inline float __bfloat162float(__nv_bfloat16 b) {
  uint32_t u = (uint32_t)b.bits << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(uint16_t)((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return __nv_bfloat16{(uint16_t)(u >> 16)};
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
// A kernel's launch entry points: its argument values packed into one
// buffer, and one CUDA thread run on the packed values.
template <class F> struct sj_signature;
template <class... A> struct sj_signature<void (*)(A...)> {
  using args = std::tuple<std::decay_t<A>...>;
};
template <auto F> struct sj_kernel {
  using Args = typename sj_signature<decltype(F)>::args;
  template <size_t... I>
  static void pack_each(void* const* a, void* out, std::index_sequence<I...>) {
    ::new (out) Args(*static_cast<const std::tuple_element_t<I, Args>*>(a[I])...);
  }
  static void pack(void* const* a, void* out) {
    pack_each(a, out, std::make_index_sequence<std::tuple_size_v<Args>>());
  }
  static void run(const void* packed, const sj_thread_ctx* t, const sj_host_api* api) {
    sj_api = api;
    threadIdx = {t->thread, 0, 0};
    blockIdx = {t->block, 0, 0};
    blockDim = {t->block_dim, 1, 1};
    gridDim = {t->grid_dim, 1, 1};
    std::apply(F, *static_cast<const Args*>(packed));
  }
  static void describe(sj_kernel_desc* d) {
    d->arg_bytes = sizeof(Args);
    d->arg_align = alignof(Args);
    d->pack = &pack;
    d->run = &run;
  }
};
)";

constexpr size_t kFiberStackBytes = size_t{256} << 10;
constexpr int kMaxBlock = 1024;
constexpr size_t kMaxLogChars = 4000;

// Runs the threads of one block as fibers on the calling thread. Used with
// ExecutionMutex() held, so one block runs at a time process-wide.
class BlockRunner {
 public:
  absl::Status RunBlock(const HostKernelEntry& kernel, const void* packed,
                        unsigned block_idx, unsigned grid, unsigned block);

 private:
  struct Fiber {
    ucontext_t ctx;
    void* stack = nullptr;  // kFiberStackBytes, the lowest page a guard
    bool done = false;
    // Resumable once *wait_phase != wait_value (waiting at a barrier).
    const uint64_t* wait_phase = nullptr;
    uint64_t wait_value = 0;
    void* asan_fake_stack = nullptr;
    void* tsan_fiber = nullptr;
  };
  // Threads that synchronize together: the block, or one warp.
  struct Group {
    unsigned live = 0, arrived = 0;
    uint64_t phase = 0;
  };

  static void FiberMain();
  static void SyncBlock(void* self);
  static unsigned long long Exchange(void* self, unsigned long long value,
                                     int src_lane);
  void Arrive(Group& g);
  void Exit();
  void EnsureFibers(unsigned n);
  void SwitchToFiber(Fiber& f);
  void SwitchToScheduler(Fiber& f, bool exiting);
  void FinishSwitchOnFiber(Fiber& f);

  std::vector<std::unique_ptr<Fiber>> fibers_;
  ucontext_t scheduler_;
  void* scheduler_tsan_ = nullptr;
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_size_ = 0;
  void* scheduler_fake_stack_ = nullptr;
  const HostKernelEntry* kernel_ = nullptr;
  const void* packed_ = nullptr;
  std::vector<abi::sj_thread_ctx> threads_;
  unsigned current_ = 0;
  Group block_;
  std::vector<Group> warps_;
  std::vector<unsigned long long> slots_;
  abi::sj_host_api api_{this, &SyncBlock, &Exchange};
};

std::mutex& ExecutionMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

BlockRunner& Runner() {
  static BlockRunner* runner = new BlockRunner;  // fibers live for the process
  return *runner;
}

void BlockRunner::EnsureFibers(unsigned n) {
  while (fibers_.size() < n) {
    auto f = std::make_unique<Fiber>();
    f->stack = mmap(nullptr, kFiberStackBytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    SJ_CHECK(f->stack != MAP_FAILED,
             "cannot map a fiber stack: ", std::strerror(errno));
    SJ_CHECK(
        mprotect(f->stack, static_cast<size_t>(getpagesize()), PROT_NONE) == 0);
#ifdef SJ_FIBER_TSAN
    f->tsan_fiber = __tsan_create_fiber(0);
#endif
    fibers_.push_back(std::move(f));
  }
}

void BlockRunner::SwitchToFiber(Fiber& f) {
#ifdef SJ_FIBER_TSAN
  __tsan_switch_to_fiber(f.tsan_fiber, 0);
#endif
#ifdef SJ_FIBER_ASAN
  __sanitizer_start_switch_fiber(&scheduler_fake_stack_, f.stack,
                                 kFiberStackBytes);
#endif
  SJ_CHECK(swapcontext(&scheduler_, &f.ctx) == 0);
#ifdef SJ_FIBER_ASAN
  __sanitizer_finish_switch_fiber(scheduler_fake_stack_, nullptr, nullptr);
#endif
}

void BlockRunner::SwitchToScheduler(Fiber& f, bool exiting) {
#ifdef SJ_FIBER_TSAN
  __tsan_switch_to_fiber(scheduler_tsan_, 0);
#endif
#ifdef SJ_FIBER_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f.asan_fake_stack,
                                 scheduler_stack_bottom_,
                                 scheduler_stack_size_);
#endif
  SJ_CHECK(swapcontext(&f.ctx, &scheduler_) == 0);
  FinishSwitchOnFiber(f);
}

void BlockRunner::FinishSwitchOnFiber(Fiber& f) {
#ifdef SJ_FIBER_ASAN
  __sanitizer_finish_switch_fiber(f.asan_fake_stack, &scheduler_stack_bottom_,
                                  &scheduler_stack_size_);
#endif
}

void BlockRunner::FiberMain() {
  BlockRunner& r = Runner();
  Fiber& f = *r.fibers_[r.current_];
  r.FinishSwitchOnFiber(f);
  r.kernel_->desc.run(r.packed_, &r.threads_[r.current_], &r.api_);
  r.Exit();
  SJ_CHECK(&f == r.fibers_[r.current_].get());
  r.SwitchToScheduler(f, /*exiting=*/true);
  SJ_CHECK(false, "a finished fiber was resumed");
}

void BlockRunner::Arrive(Group& g) {
  if (++g.arrived == g.live) {
    g.arrived = 0;
    ++g.phase;
    return;
  }
  Fiber& f = *fibers_[current_];
  f.wait_phase = &g.phase;
  f.wait_value = g.phase;
  SwitchToScheduler(f, /*exiting=*/false);
}

void BlockRunner::Exit() {
  fibers_[current_]->done = true;
  for (Group* g : {&block_, &warps_[current_ / 32]}) {
    --g->live;
    if (g->live > 0 && g->arrived == g->live) {
      g->arrived = 0;
      ++g->phase;
    }
  }
}

void BlockRunner::SyncBlock(void* self) {
  BlockRunner& r = *static_cast<BlockRunner*>(self);
  r.Arrive(r.block_);
}

unsigned long long BlockRunner::Exchange(void* self, unsigned long long value,
                                         int src_lane) {
  BlockRunner& r = *static_cast<BlockRunner*>(self);
  const unsigned t = r.current_, warp = t / 32;
  r.slots_[t] = value;
  r.Arrive(r.warps_[warp]);
  unsigned long long result = value;
  const size_t src = size_t{warp} * 32 + static_cast<size_t>(src_lane);
  if (src_lane >= 0 && src_lane < 32 && src < r.threads_.size() &&
      (r.threads_.size() == 1 || !r.fibers_[src]->done)) {
    result = r.slots_[src];
  }
  r.Arrive(r.warps_[warp]);  // every lane read before the slots are reused
  return result;
}

absl::Status BlockRunner::RunBlock(const HostKernelEntry& kernel,
                                   const void* packed, unsigned block_idx,
                                   unsigned grid, unsigned block) {
  kernel_ = &kernel;
  packed_ = packed;
  threads_.resize(block);
  for (unsigned t = 0; t < block; ++t)
    threads_[t] = {t, block_idx, block, grid};
  block_ = {block, 0, 0};
  warps_.assign((block + 31) / 32, Group());
  for (unsigned w = 0; w < warps_.size(); ++w)
    warps_[w].live = std::min(32u, block - 32 * w);
  slots_.assign(block, 0);
  current_ = 0;
  if (block == 1) {  // barriers complete at once: no fiber needed
    kernel.desc.run(packed, &threads_[0], &api_);
    return absl::OkStatus();
  }
  EnsureFibers(block);
#ifdef SJ_FIBER_TSAN
  scheduler_tsan_ = __tsan_get_current_fiber();
#endif
  for (unsigned t = 0; t < block; ++t) {
    Fiber& f = *fibers_[t];
    f.done = false;
    f.wait_phase = nullptr;
    f.asan_fake_stack = nullptr;
    SJ_CHECK(getcontext(&f.ctx) == 0);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kFiberStackBytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, &BlockRunner::FiberMain, 0);
  }
  unsigned remaining = block;
  while (remaining > 0) {
    bool progressed = false;
    for (unsigned t = 0; t < block; ++t) {
      Fiber& f = *fibers_[t];
      if (f.done || (f.wait_phase != nullptr && *f.wait_phase == f.wait_value))
        continue;
      f.wait_phase = nullptr;
      current_ = t;
      SwitchToFiber(f);
      progressed = true;
      if (f.done) --remaining;
    }
    if (!progressed) {
      return absl::InternalError(absl::StrCat(
          "host emulation: kernel ", kernel.name, " deadlocked in block ",
          block_idx, ": ", remaining, " of ", block,
          " threads wait at __syncthreads or a warp shuffle that the others "
          "never reach"));
    }
  }
  return absl::OkStatus();
}

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

const std::string& HostEmulationHeader() {
  static const std::string* header = new std::string(absl::StrCat(
      kHeaderStart, SJ_EXPANDED_TEXT(SJ_EMULATION_ABI), "\n", kHeaderEnd));
  return *header;
}

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
  std::lock_guard<std::mutex> lock(ExecutionMutex());
  for (int64_t b = 0; b < grid; ++b) {
    RETURN_IF_ERROR(Runner().RunBlock(
        *entry_, packed_args, static_cast<unsigned>(b),
        static_cast<unsigned>(grid), static_cast<unsigned>(block)));
  }
  return absl::OkStatus();
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
