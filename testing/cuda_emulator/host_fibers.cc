// The fiber scheduler of the host emulation: a block's threads as fibers on
// the calling thread (switched by a few instructions on x86-64, by ucontext
// elsewhere), with the barriers of __syncthreads and the warp shuffles
// between them.
#include "testing/cuda_emulator/host_fibers.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/host_math.h"
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
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef SJ_FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#if defined(__x86_64__) && !defined(SJ_FIBER_TSAN)
// The fast switch (x86-64 System V): saves the callee-saved registers on the
// current stack, stores its pointer in *from, loads `to` and restores what
// was saved there. Unlike swapcontext it leaves the signal mask alone, which
// costs a system call per switch, and a block's threads switch at every
// __syncthreads and twice per warp shuffle. (ThreadSanitizer builds keep
// ucontext, whose switches it intercepts.)
#define SJ_FIBER_FAST_SWITCH 1
extern "C" void sj_fiber_switch(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .globl sj_fiber_switch
  .hidden sj_fiber_switch
  .type sj_fiber_switch, @function
sj_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size sj_fiber_switch, .-sj_fiber_switch
)");
#endif

namespace stepjit::codegen::cuda {
namespace {

constexpr size_t kFiberStackBytes = size_t{256} << 10;

// The math the emulation header routes to the host: the CPU kernels'.
const abi::sj_host_math kHostMath = {
    .expf = &ir::HostMath<float>::Exp,
    .logf = &ir::HostMath<float>::Log,
    .tanhf = &ir::HostMath<float>::Tanh,
    .erff = &ir::HostMath<float>::Erf,
    .exp = &ir::HostMath<double>::Exp,
    .log = &ir::HostMath<double>::Log,
    .tanh = &ir::HostMath<double>::Tanh,
};

// Runs the threads of one block as fibers on the calling thread. Used with
// ExecutionMutex() held, so one block runs at a time process-wide.
class BlockRunner {
 public:
  absl::Status RunBlock(const abi::sj_kernel_desc& kernel,
                        absl::string_view name, const void* packed,
                        unsigned block_idx, unsigned grid, unsigned block);

 private:
  struct Fiber {
    ucontext_t ctx;
    void* sp = nullptr;     // the fast switch's saved stack pointer
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

  // Makes `f` start at FiberMain on its own stack when next switched to.
  void ResetFiber(Fiber& f);

  std::vector<std::unique_ptr<Fiber>> fibers_;
  ucontext_t scheduler_;
  void* scheduler_sp_ = nullptr;  // the fast switch's
  void* scheduler_tsan_ = nullptr;
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_size_ = 0;
  void* scheduler_fake_stack_ = nullptr;
  const abi::sj_kernel_desc* kernel_ = nullptr;
  const void* packed_ = nullptr;
  std::vector<abi::sj_thread_ctx> threads_;
  unsigned current_ = 0;
  Group block_;
  std::vector<Group> warps_;
  std::vector<unsigned long long> slots_;
  abi::sj_host_api api_{this, &SyncBlock, &Exchange, &kHostMath};
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
#ifdef SJ_FIBER_FAST_SWITCH
  sj_fiber_switch(&scheduler_sp_, f.sp);
#else
  SJ_CHECK(swapcontext(&scheduler_, &f.ctx) == 0);
#endif
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
#ifdef SJ_FIBER_FAST_SWITCH
  sj_fiber_switch(&f.sp, scheduler_sp_);
#else
  SJ_CHECK(swapcontext(&f.ctx, &scheduler_) == 0);
#endif
  FinishSwitchOnFiber(f);
}

void BlockRunner::ResetFiber(Fiber& f) {
#ifdef SJ_FIBER_ASAN
  // The stack's previous run ended in a switch, not a return: the
  // redzones of its frames are still poisoned.
  __asan_unpoison_memory_region(
      static_cast<char*>(f.stack) + getpagesize(),
      kFiberStackBytes - static_cast<size_t>(getpagesize()));
#endif
#ifdef SJ_FIBER_FAST_SWITCH
  // What sj_fiber_switch pops, from the 16-byte aligned top down: the
  // return address (FiberMain, entered as if called: rsp = 8 mod 16), six
  // zeroed registers, and the MXCSR and x87 control word in effect now.
  auto top = reinterpret_cast<uintptr_t>(f.stack) + kFiberStackBytes;
  top &= ~uintptr_t{15};
  auto* words = reinterpret_cast<uint64_t*>(top) - 9;
  std::memset(words, 0, 9 * sizeof(uint64_t));
  uint32_t mxcsr = 0;
  uint16_t fpu_control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpu_control));
  std::memcpy(&words[0], &mxcsr, sizeof(mxcsr));
  std::memcpy(reinterpret_cast<char*>(&words[0]) + 4, &fpu_control,
              sizeof(fpu_control));
  words[7] = reinterpret_cast<uint64_t>(&BlockRunner::FiberMain);
  f.sp = words;
#else
  SJ_CHECK(getcontext(&f.ctx) == 0);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = kFiberStackBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, &BlockRunner::FiberMain, 0);
#endif
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
  r.kernel_->run(r.packed_, &r.threads_[r.current_], &r.api_);
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

absl::Status BlockRunner::RunBlock(const abi::sj_kernel_desc& kernel,
                                   absl::string_view name, const void* packed,
                                   unsigned block_idx, unsigned grid,
                                   unsigned block) {
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
    kernel.run(packed, &threads_[0], &api_);
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
    ResetFiber(f);
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
          "host emulation: kernel ", name, " deadlocked in block ", block_idx,
          ": ", remaining, " of ", block,
          " threads wait at __syncthreads or a warp shuffle that the others "
          "never reach"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunOnFibers(const abi::sj_kernel_desc& kernel,
                         absl::string_view name, const void* packed,
                         unsigned grid, unsigned block) {
  std::lock_guard<std::mutex> lock(ExecutionMutex());
  for (unsigned b = 0; b < grid; ++b)
    RETURN_IF_ERROR(Runner().RunBlock(kernel, name, packed, b, grid, block));
  return absl::OkStatus();
}

}  // namespace stepjit::codegen::cuda
