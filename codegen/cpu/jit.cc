// The CPU JIT: object compilation, the kernel cache and ORC loading.
#include "codegen/cpu/jit.h"

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "codegen/kernel_cache.h"
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

bool PerfJitDumpRequested() {
  const char* v = std::getenv("STEPJIT_PERF");
  return v != nullptr && std::string_view(v) == "1";
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
              return std::move(layer);
            });
      }
      auto lljit = builder.create();
      if (!lljit) {
        error = llvm::toString(lljit.takeError());
        return;
      }
      jit = new Jit(std::move(*lljit), std::move(*tm));
    });
    if (jit == nullptr) return absl::InternalError(absl::StrCat("LLVM JIT unavailable: ", error));
    return jit;
  }

  std::string TargetId() const {
    return absl::StrCat(tm_->getTargetTriple().str(), ";", tm_->getTargetCPU().str(), ";",
                        tm_->getTargetFeatureString().str());
  }

  absl::StatusOr<JitLoadResult> Load(llvm::Module& m, const JitSymbols& symbols,
                                     const JitLoadOptions& options) {
    std::lock_guard<std::mutex> lock(mu_);
    JitLoadResult k;
    llvm::Module* module = &m;
    module->setDataLayout(tm_->createDataLayout());
    module->setTargetTriple(tm_->getTargetTriple().str());
    {
      llvm::raw_string_ostream os(k.llvm_ir_raw);
      module->print(os, nullptr);
    }
    const CacheKey key{k.llvm_ir_raw, JitCompilerId(), TargetId(),
                       absl::StrCat("O2;", options.cache_tag)};
    const std::string digest = key.Digest();
    k.cache_key = digest;
    std::optional<std::string> object;
    if (options.use_cache) {
      if (auto it = loaded_.find(digest); it != loaded_.end()) {
        k.cache_hit = true;
        if (options.want_optimized_ir) Optimize(*module, &k.llvm_ir);
        k.fns = it->second;
        return k;
      }
      object = KernelCache::Global().Lookup(key);
    }
    if (!object || options.want_optimized_ir) Optimize(*module, &k.llvm_ir);
    if (object) {
      k.cache_hit = true;
    } else {
      ASSIGN_OR_RETURN(object, EmitObject(*module));
      if (options.use_cache) KernelCache::Global().Store(key, *object);
    }
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
    return k;
  }

 private:
  Jit(std::unique_ptr<llvm::orc::LLJIT> jit, std::unique_ptr<llvm::TargetMachine> tm)
      : jit_(std::move(jit)), tm_(std::move(tm)) {}

  // The -O2 pipeline with the host's features.
  void Optimize(llvm::Module& module, std::string* text) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(tm_.get());
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

  absl::StatusOr<std::string> EmitObject(llvm::Module& module) {
    llvm::SmallVector<char, 0> buffer;
    llvm::raw_svector_ostream os(buffer);
    llvm::legacy::PassManager pm;
    if (tm_->addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_ObjectFile)) {
      return absl::InternalError("the LLVM target cannot emit object files");
    }
    pm.run(module);
    return std::string(buffer.begin(), buffer.end());
  }

  std::mutex mu_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::unique_ptr<llvm::TargetMachine> tm_;
  absl::flat_hash_map<std::string, JitAddresses> loaded_;  // by cache key digest
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
