// Elementwise region lowering (one loop over the region's elements) and the ORC JIT.
#include "codegen/cpu/elementwise_kernel.h"

#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "codegen/cpu/llvm_math.h"
#include "ir/scalar_def.h"
#include "ir/status.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"

namespace stepjit::codegen::cpu {

using ir::AttrKey;
using ir::DType;
using ir::Node;
using ir::OpId;
using ir::Value;

namespace {

absl::Status Unsupported(absl::string_view why) { return absl::UnimplementedError(why); }

llvm::Type* LlvmType(llvm::LLVMContext& c, DType t) {
  switch (t) {
    case DType::kF32: return llvm::Type::getFloatTy(c);
    case DType::kF64: return llvm::Type::getDoubleTy(c);
    case DType::kBool: return llvm::Type::getInt1Ty(c);
    default: return nullptr;
  }
}

class Lowering {
 public:
  Lowering(const ir::Graph& body, llvm::LLVMContext& ctx, llvm::Module& module)
      : body_(body), ctx_(ctx), m_(module), b_(ctx) {}

  absl::StatusOr<int64_t> Run(const std::string& name) {
    // Every value is full-size (numel_) or 0-d.
    for (const Value* p : body_.params()) RETURN_IF_ERROR(Check(p));
    for (const auto& n : body_.nodes()) {
      if (n->kind() != ir::NodeKind::kOp) return Unsupported("nested region");
      RETURN_IF_ERROR(Check(n->output()));
    }
    for (const Value* r : body_.returns()) {
      if (ir::NumElements(r->type().shape) != numel_ || numel_ <= 1) {
        return Unsupported("a region output is not full-size");
      }
    }
    auto* i64 = llvm::Type::getInt64Ty(ctx_);
    auto* ptr = llvm::Type::getInt8PtrTy(ctx_);
    auto* fn_type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_),
                                            {ptr->getPointerTo(), i64, i64}, false);
    fn_ = llvm::Function::Create(fn_type, llvm::Function::ExternalLinkage, name, m_);
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    auto* loop = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
    llvm::Value* ptrs = fn_->getArg(0);
    llvm::Value* begin = fn_->getArg(1);
    llvm::Value* end = fn_->getArg(2);
    b_.SetInsertPoint(entry);
    // Base pointers, and 0-d values loaded once outside the loop.
    const size_t num_params = body_.params().size();
    for (size_t i = 0; i < num_params + body_.returns().size(); ++i) {
      llvm::Value* slot = b_.CreateLoad(ptr, b_.CreateConstGEP1_64(ptr, ptrs, i));
      bases_.push_back(slot);
    }
    for (size_t i = 0; i < num_params; ++i) {
      const Value* p = body_.params()[i];
      if (ir::NumElements(p->type().shape) == 1) scalars_[p] = LoadAt(p->type().dtype, bases_[i], b_.getInt64(0));
    }
    b_.CreateCondBr(b_.CreateICmpSLT(begin, end), loop, exit);
    b_.SetInsertPoint(loop);
    llvm::PHINode* i = b_.CreatePHI(i64, 2);
    i->addIncoming(begin, entry);
    absl::flat_hash_map<const Value*, llvm::Value*> env = scalars_;
    for (size_t k = 0; k < num_params; ++k) {
      const Value* p = body_.params()[k];
      if (!env.contains(p)) env[p] = LoadAt(p->type().dtype, bases_[k], i);
    }
    for (const auto& n : body_.nodes()) {
      ASSIGN_OR_RETURN(llvm::Value * v, Emit(*n, env));
      env[n->output()] = v;
    }
    for (size_t k = 0; k < body_.returns().size(); ++k) {
      const Value* r = body_.returns()[k];
      StoreAt(r->type().dtype, bases_[num_params + k], i, env.at(r));
    }
    llvm::Value* next = b_.CreateAdd(i, b_.getInt64(1));
    i->addIncoming(next, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpSLT(next, end), loop, exit);
    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
    return numel_;
  }

 private:
  absl::Status Check(const Value* v) {
    if (LlvmType(ctx_, v->type().dtype) == nullptr) {
      return Unsupported(absl::StrCat("dtype ", ir::DTypeName(v->type().dtype)));
    }
    const int64_t n = ir::NumElements(v->type().shape);
    if (n == 1 && v->type().shape.empty()) return absl::OkStatus();
    if (numel_ == 0) numel_ = n;
    if (n != numel_) return Unsupported("operands of different sizes");
    return absl::OkStatus();
  }

  llvm::Value* Address(DType t, llvm::Value* base, llvm::Value* i) {
    llvm::Type* elem = t == DType::kBool ? b_.getInt8Ty() : LlvmType(ctx_, t);
    return b_.CreateGEP(elem, b_.CreateBitCast(base, elem->getPointerTo()), i);
  }
  llvm::Value* LoadAt(DType t, llvm::Value* base, llvm::Value* i) {
    if (t == DType::kBool) {
      return b_.CreateICmpNE(b_.CreateLoad(b_.getInt8Ty(), Address(t, base, i)), b_.getInt8(0));
    }
    return b_.CreateLoad(LlvmType(ctx_, t), Address(t, base, i));
  }
  void StoreAt(DType t, llvm::Value* base, llvm::Value* i, llvm::Value* v) {
    if (t == DType::kBool) v = b_.CreateZExt(v, b_.getInt8Ty());
    b_.CreateStore(v, Address(t, base, i));
  }
  // Converts like the eager Convert<To>(From) for f32/f64/bool.
  llvm::Value* Convert(llvm::Value* v, DType from, DType to) {
    if (from == to) return v;
    llvm::Type* ty = LlvmType(ctx_, to);
    if (to == DType::kBool) return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
    if (from == DType::kBool) return b_.CreateUIToFP(v, ty);
    return from == DType::kF32 ? b_.CreateFPExt(v, ty) : b_.CreateFPTrunc(v, ty);
  }

  absl::StatusOr<llvm::Value*> Emit(const Node& n, absl::flat_hash_map<const Value*, llvm::Value*>& env) {
    const OpId op = n.op();
    const DType out = n.output()->type().dtype;
    auto in = [&](size_t k, DType as) {
      const Value* v = n.inputs()[k];
      return Convert(env.at(v), v->type().dtype, as);
    };
    if (op == OpId::kFull) {
      const double value = n.attrs().GetDouble(AttrKey::kValue);
      return Convert(llvm::ConstantFP::get(b_.getDoubleTy(), value), DType::kF64, out);
    }
    if (op == OpId::kReshape || op == OpId::kSqueeze || op == OpId::kUnsqueeze) {
      return env.at(n.inputs()[0]);
    }
    if (op == OpId::kCast) return in(0, out);
    if (op == OpId::kWhere) return b_.CreateSelect(in(0, DType::kBool), in(1, out), in(2, out));
    const ir::OpKind kind = ir::GetOpInfo(op).kind;
    if (kind != ir::OpKind::kElementwise && kind != ir::OpKind::kInplaceUpdate) {
      return Unsupported(absl::StrCat("op ", ir::OpName(op)));
    }
    // Operands are converted to the compute dtype first, as dispatch does.
    DType compute = out;
    if (out == DType::kBool) {
      compute = n.inputs()[0]->type().dtype;
      for (const Value* v : n.inputs()) {
        compute = ir::ResultType(std::vector<ir::TensorType>{{compute, {1}}, v->type()});
      }
    }
    if (compute == DType::kBool) return Unsupported("bool arithmetic");
    LlvmMath m{b_, m_, LlvmType(ctx_, compute)};
    switch (op) {
#define SJ_UNARY(e, expr) \
  case OpId::k##e:        \
    return ir::ScalarDef<OpId::k##e>::Apply(m, in(0, compute));
#define SJ_BINARY(e, expr) \
  case OpId::k##e:         \
    return ir::ScalarDef<OpId::k##e>::Apply(m, in(0, compute), in(1, compute));
#define SJ_UPDATE(e, expr)                                                                   \
  case OpId::k##e: {                                                                         \
    llvm::Value* zero = m.Const(0);                                                          \
    return ir::ScalarDef<OpId::k##e>::Apply(                                                 \
        m, in(0, compute), n.inputs().size() > 1 ? in(1, compute) : zero,                    \
        n.inputs().size() > 2 ? in(2, compute) : zero,                                       \
        m.Const(n.attrs().GetDouble(AttrKey::kAlpha, 1.0)),                                  \
        m.Const(n.attrs().GetDouble(AttrKey::kValue, 0.0)));                                 \
  }
      SJ_UNARY_SCALAR_DEFS(SJ_UNARY)
      SJ_BINARY_SCALAR_DEFS(SJ_BINARY)
      SJ_COMPARE_SCALAR_DEFS(SJ_BINARY)
      SJ_UPDATE_SCALAR_DEFS(SJ_UPDATE)
#undef SJ_UNARY
#undef SJ_BINARY
#undef SJ_UPDATE
      default:
        return Unsupported(absl::StrCat("op ", ir::OpName(op)));
    }
  }

  const ir::Graph& body_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  llvm::Function* fn_ = nullptr;
  int64_t numel_ = 0;
  std::vector<llvm::Value*> bases_;
  absl::flat_hash_map<const Value*, llvm::Value*> scalars_;
};

// One process-wide JIT for the host CPU (its features drive vectorization).
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
      auto lljit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(*jtmb).create();
      if (!lljit || !tm) {
        error = lljit ? llvm::toString(tm.takeError()) : llvm::toString(lljit.takeError());
        return;
      }
      auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
          (*lljit)->getDataLayout().getGlobalPrefix());
      if (!gen) {
        error = llvm::toString(gen.takeError());
        return;
      }
      (*lljit)->getMainJITDylib().addGenerator(std::move(*gen));
      jit = new Jit(std::move(*lljit), std::move(*tm));
    });
    if (jit == nullptr) return absl::InternalError(absl::StrCat("LLVM JIT unavailable: ", error));
    return jit;
  }

  absl::StatusOr<ElementwiseFn> Add(std::unique_ptr<llvm::LLVMContext> ctx,
                                    std::unique_ptr<llvm::Module> module, const std::string& name,
                                    std::string* raw_text, std::string* ir_text) {
    std::lock_guard<std::mutex> lock(mu_);
    module->setDataLayout(tm_->createDataLayout());
    module->setTargetTriple(tm_->getTargetTriple().str());
    if (raw_text != nullptr) {
      llvm::raw_string_ostream os(*raw_text);
      module->print(os, nullptr);
    }
    // -O2 with the host's features, before handing the module to ORC.
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
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(*module, mam);
    if (ir_text != nullptr) {
      llvm::raw_string_ostream os(*ir_text);
      module->print(os, nullptr);
    }
    if (auto err = jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(ctx)))) {
      return absl::InternalError(llvm::toString(std::move(err)));
    }
    auto sym = jit_->lookup(name);
    if (!sym) return absl::InternalError(llvm::toString(sym.takeError()));
    return reinterpret_cast<ElementwiseFn>(sym->getAddress());
  }

 private:
  Jit(std::unique_ptr<llvm::orc::LLJIT> jit, std::unique_ptr<llvm::TargetMachine> tm)
      : jit_(std::move(jit)), tm_(std::move(tm)) {}
  std::mutex mu_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::unique_ptr<llvm::TargetMachine> tm_;
  int next_ = 0;

 public:
  // Symbol names must be unique within the one JIT dylib.
  std::string UniqueName(absl::string_view prefix) {
    std::lock_guard<std::mutex> lock(mu_);
    return absl::StrCat(prefix, "_k", next_++);
  }
};

}  // namespace

absl::StatusOr<ElementwiseKernel> CompileElementwise(const ir::Graph& body) {
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>("stepjit", *ctx);
  ASSIGN_OR_RETURN(Jit * jit, Jit::Get());
  const std::string name = jit->UniqueName(body.name());
  Lowering lowering(body, *ctx, *module);
  ASSIGN_OR_RETURN(int64_t numel, lowering.Run(name));
  std::string verify;
  llvm::raw_string_ostream vos(verify);
  if (llvm::verifyModule(*module, &vos)) {
    return absl::InternalError(absl::StrCat("generated LLVM IR is invalid: ", vos.str()));
  }
  ElementwiseKernel k;
  k.numel = numel;
  k.name = name;
  ASSIGN_OR_RETURN(k.fn, jit->Add(std::move(ctx), std::move(module), name, &k.llvm_ir_raw,
                                  &k.llvm_ir));
  return k;
}

}  // namespace stepjit::codegen::cpu
