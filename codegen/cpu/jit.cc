// The CPU JIT: object compilation, the kernel cache and ORC loading.
#include "codegen/cpu/jit.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string_view>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "codegen/kernel_cache.h"
#include "config/env.h"
#include "ir/status.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/JITEventListener.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h"
#include "llvm/ExecutionEngine/SectionMemoryManager.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"

namespace stepjit::codegen::cpu {
namespace {

// The optimization pipeline's name in every cache key: objects made by
// another pipeline are not reused.
constexpr char kPipelineTag[] = "O2-nounroll";

bool PerfJitDumpRequested() {
  return config::ChoiceOrThrow(config::Env::kPerf) == "1";
}

// One process-wide JIT for the host CPU (its features drive vectorization).
// Modules are optimized and compiled to object code here, so the object can
// be cached; each object is linked into its own JITDylib.
class Jit {
 public:
  static absl::StatusOr<Jit*> Get() {
    static std::once_flag once;
    static Jit* jit = nullptr;
    static std::string error;
    std::call_once(once, [] {
      llvm::InitializeNativeTarget();
      llvm::InitializeNativeTargetAsmPrinter();
      auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
      if (!jtmb) {
        error = llvm::toString(jtmb.takeError());
        return;
      }
      jtmb->setCodeGenOptLevel(llvm::CodeGenOpt::Default);
      auto tm = jtmb->createTargetMachine();
      if (!tm) {
        error = llvm::toString(tm.takeError());
        return;
      }
      llvm::orc::LLJITBuilder builder;
      builder.setJITTargetMachineBuilder(*jtmb);
      if (PerfJitDumpRequested()) {
        // STEPJIT_PERF=1: jitdump records for `perf inject --jit`, so that
        // perf names generated kernels (their symbols are sj_<digest>_main).
        builder.setObjectLinkingLayerCreator(
            [](llvm::orc::ExecutionSession& es, const llvm::Triple&)
                -> llvm::Expected<std::unique_ptr<llvm::orc::ObjectLayer>> {
              auto layer =
                  std::make_unique<llvm::orc::RTDyldObjectLinkingLayer>(es, [] {
                    return std::make_unique<llvm::SectionMemoryManager>();
                  });
              if (llvm::JITEventListener* perf =
                      llvm::JITEventListener::createPerfJITEventListener()) {
                layer->registerJITEventListener(*perf);
              }
              return layer;
            });
      }
      auto lljit = builder.create();
      if (!lljit) {
        error = llvm::toString(lljit.takeError());
        return;
      }
      jit = new Jit(std::move(*lljit), std::move(*tm), *jtmb);
    });
    if (jit == nullptr) return absl::InternalError(absl::StrCat("LLVM JIT unavailable: ", error));
    return jit;
  }

  std::string TargetId() const {
    return absl::StrCat(tm_->getTargetTriple().str(), ";", tm_->getTargetCPU().str(), ";",
                        tm_->getTargetFeatureString().str());
  }

  // Safe to call from several threads at once: optimization and object
  // emission (most of a cold compile) run unlocked, each thread with its
  // own TargetMachine; only linking into the JIT takes the lock.
  absl::StatusOr<JitLoadResult> Load(llvm::Module& m, const JitSymbols& symbols,
                                     const JitLoadOptions& options) {
    JitLoadResult k;
    ASSIGN_OR_RETURN(llvm::TargetMachine * tm, ThreadTargetMachine());
    llvm::Module* module = &m;
    module->setDataLayout(tm->createDataLayout());
    module->setTargetTriple(tm->getTargetTriple().str());
    {
      llvm::raw_string_ostream os(k.llvm_ir_raw);
      module->print(os, nullptr);
    }
    const CacheKey key{k.llvm_ir_raw, JitCompilerId(), TargetId(),
                       absl::StrCat(kPipelineTag, ";", options.cache_tag)};
    const std::string digest = key.Digest();
    k.cache_key = digest;
    std::optional<std::string> object;
    // While one thread compiles a digest, others asking for it wait and
    // then share its result (identical regions compiled at once, like the
    // per-layer optimizer updates, compile once).
    bool claimed = false;
    absl::Cleanup release = [&] {
      if (!claimed) return;
      std::lock_guard<std::mutex> lock(mu_);
      compiling_.erase(digest);
      compiled_cv_.notify_all();
    };
    if (options.use_cache) {
      std::optional<JitAddresses> loaded;
      {
        std::unique_lock<std::mutex> lock(mu_);
        compiled_cv_.wait(lock, [&] { return !compiling_.contains(digest); });
        if (auto it = loaded_.find(digest); it != loaded_.end()) {
          loaded = it->second;
        } else {
          compiling_.insert(digest);
          claimed = true;
        }
      }
      if (loaded) {
        k.cache_hit = true;
        if (options.want_optimized_ir) Optimize(*tm, *module, &k.llvm_ir);
        k.fns = *loaded;
        return k;
      }
      object = KernelCache::Global().Lookup(key);
    }
    if (!object || options.want_optimized_ir)
      Optimize(*tm, *module, &k.llvm_ir);
    if (object) {
      k.cache_hit = true;
    } else {
      ASSIGN_OR_RETURN(object, EmitObject(*tm, *module));
      if (options.use_cache) KernelCache::Global().Store(key, *object);
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto jd = jit_->createJITDylib(absl::StrCat("sj.", digest.substr(0, 16), ".", next_dylib_++));
    if (!jd) return absl::InternalError(llvm::toString(jd.takeError()));
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        jit_->getDataLayout().getGlobalPrefix());
    if (!gen) return absl::InternalError(llvm::toString(gen.takeError()));
    jd->addGenerator(std::move(*gen));
    if (auto err = jit_->addObjectFile(*jd, llvm::MemoryBuffer::getMemBufferCopy(*object, symbols.main))) {
      return absl::InternalError(llvm::toString(std::move(err)));
    }
    JitAddresses& fns = k.fns;
    for (auto [name, out] : {std::pair{&symbols.scalar, &fns.scalar}, std::pair{&symbols.main, &fns.main},
                             std::pair{&symbols.reduced, &fns.reduced}}) {
      if (name->empty()) continue;
      auto sym = jit_->lookup(*jd, *name);
      if (!sym) return absl::InternalError(llvm::toString(sym.takeError()));
      *out = sym->getAddress();
    }
    if (options.use_cache) loaded_[digest] = fns;
    return k;  // `release` takes mu_ again after this lock is dropped
  }

 private:
  Jit(std::unique_ptr<llvm::orc::LLJIT> jit,
      std::unique_ptr<llvm::TargetMachine> tm,
      llvm::orc::JITTargetMachineBuilder jtmb)
      : jit_(std::move(jit)), tm_(std::move(tm)), jtmb_(std::move(jtmb)) {}

  // A TargetMachine is not safe to share between concurrent compiles (ORC's
  // ConcurrentIRCompiler makes one per compile, too): one per thread, made
  // like tm_.
  absl::StatusOr<llvm::TargetMachine*> ThreadTargetMachine() {
    thread_local std::unique_ptr<llvm::TargetMachine> tm;
    if (tm == nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      auto made = jtmb_.createTargetMachine();
      if (!made) return absl::InternalError(llvm::toString(made.takeError()));
      tm = std::move(*made);
    }
    return tm.get();
  }

  // The -O2 pipeline with the host's features, without loop unrolling: the
  // vectorizer already interleaves each loop's vector body (4 x 16 lanes
  // with AVX-512), so unrolling it again bought no measurable kernel speed
  // and doubled the code the backend must select and allocate (two thirds
  // of a cold compile's time went to object emission).
  void Optimize(llvm::TargetMachine& tm, llvm::Module& module,
                std::string* text) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions tuning;
    tuning.LoopUnrolling = false;
    llvm::PassBuilder pb(&tm, tuning);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(module, mam);
    text->clear();
    llvm::raw_string_ostream os(*text);
    module.print(os, nullptr);
  }

  absl::StatusOr<std::string> EmitObject(llvm::TargetMachine& tm,
                                         llvm::Module& module) {
    llvm::SmallVector<char, 0> buffer;
    llvm::raw_svector_ostream os(buffer);
    llvm::legacy::PassManager pm;
    if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_ObjectFile)) {
      return absl::InternalError("the LLVM target cannot emit object files");
    }
    pm.run(module);
    return std::string(buffer.begin(), buffer.end());
  }

  std::mutex mu_;  // guards loaded_, next_dylib_, linking and jtmb_ use
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::unique_ptr<llvm::TargetMachine> tm_;  // the host's identity (TargetId)
  llvm::orc::JITTargetMachineBuilder jtmb_;
  absl::flat_hash_map<std::string, JitAddresses> loaded_;  // by cache key digest
  absl::flat_hash_set<std::string> compiling_;  // digests being compiled now
  std::condition_variable compiled_cv_;         // signalled as each finishes
  int next_dylib_ = 0;
};

}  // namespace

absl::StatusOr<JitLoadResult> JitLoad(llvm::Module& module, const JitSymbols& symbols,
                                      const JitLoadOptions& options) {
  ASSIGN_OR_RETURN(Jit * jit, Jit::Get());
  return jit->Load(module, symbols, options);
}

std::string JitCompilerId() { return "LLVM " LLVM_VERSION_STRING; }

std::string JitTargetId() {
  absl::StatusOr<Jit*> jit = Jit::Get();
  return jit.ok() ? (*jit)->TargetId() : "unavailable";
}

}  // namespace stepjit::codegen::cpu
