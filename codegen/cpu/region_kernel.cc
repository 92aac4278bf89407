// Fusion region lowering (scalar prologue, row loop over F, reduced epilogue)
// and the ORC JIT that loads cached object code.
#include "codegen/cpu/region_kernel.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/coalesce.h"
#include "codegen/cpu/jit.h"
#include "codegen/cpu/llvm_math.h"
#include "codegen/ir_names.h"
#include "codegen/region_expand.h"
#include "codegen/region_plan.h"
#include "codegen/region_rows.h"
#include "codegen/scalar_op.h"
#include "codegen/sha256.h"
#include "ir/printer.h"
#include "ir/status.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

namespace stepjit::codegen::cpu {

namespace {

// Bumped whenever the lowering changes the code it emits for a given body,
// so stale cache entries are never reused.
constexpr char kLoweringVersion[] = "region-lowering-7";

// The storage type of one element in memory.
llvm::Type* MemType(llvm::LLVMContext& c, DType t) {
  switch (t) {
    case DType::kF32:
      return llvm::Type::getFloatTy(c);
    case DType::kF64:
      return llvm::Type::getDoubleTy(c);
    case DType::kF16:
      return llvm::Type::getHalfTy(c);
    case DType::kBF16:
      return llvm::Type::getInt16Ty(c);
    case DType::kBool:
      return llvm::Type::getInt8Ty(c);
    case DType::kI64:
      return llvm::Type::getInt64Ty(c);
    case DType::kI32:
      return llvm::Type::getInt32Ty(c);
    default:
      return nullptr;
  }
}

// The register type a value of dtype `t` lives in: its storage type, but
// half types compute in f32 and booleans are i1.
llvm::Type* RegType(llvm::LLVMContext& c, DType t) {
  switch (t) {
    case DType::kF16:
    case DType::kBF16:
      return llvm::Type::getFloatTy(c);
    case DType::kBool:
      return llvm::Type::getInt1Ty(c);
    default:
      return MemType(c, t);
  }
}

// Emits the region's functions into one module.
class Lowering {
 public:
  // `dims`: null for a kernel specialized to the body's sizes; else the
  // kernel reads its loop sizes from a run-time table and `dims` receives
  // this body's values of it, in the order the kernel reads them.
  Lowering(const ir::Graph& body, const Plan& plan, llvm::LLVMContext& ctx,
           llvm::Module& module, std::vector<int64_t>* dims = nullptr)
      : body_(body), plan_(plan), ctx_(ctx), m_(module), b_(ctx), dims_(dims) {}

  absl::Status Run(const std::string& prefix, RegionKernel& k) {
    const size_t np = body_.params().size(), nr = body_.returns().size();
    scratch_index_ = static_cast<int>(np + nr);
    // The accumulators (before any function is emitted: the dims table
    // follows them in `ptrs`): every reduction in the classic plan, the
    // totals over rows in the row plan.
    for (const auto& n : body_.nodes()) {
      if (IsReduction(n->op()) &&
          (plan_.row_phases == 0 ||
           plan_.domain.at(n->output()) == Domain::kTotal))
        ++num_accumulators_;
    }
    // Scalars that the loops read go through scratch slots.
    for (const auto& n : body_.nodes()) {
      const Domain d = plan_.domain.at(n->output());
      if (d == Domain::kScalar) continue;
      for (const Value* v : n->inputs()) {
        auto it = plan_.domain.find(v);
        if (it != plan_.domain.end() && it->second == Domain::kScalar &&
            !absl::c_linear_search(slots_, v)) {
          slots_.push_back(v);
        }
      }
    }
    bool scalar_work = !slots_.empty();
    for (const Value* r : body_.returns())
      scalar_work |= plan_.domain.at(r) == Domain::kScalar;
    k.num_slots = static_cast<int>(slots_.size());
    symbols_.scalar = scalar_work ? prefix + "_scalar" : "";
    if (scalar_work) RETURN_IF_ERROR(EmitScalar(symbols_.scalar));
    if (plan_.row_phases > 0) return RunRows(prefix, k);
    k.row = plan_.row_loop ? plan_.f_shape.back() : plan_.f_numel;
    k.numel = plan_.f_numel;
    k.reduced_numel = plan_.r_numel;
    for (const auto& n : body_.nodes()) {
      if (!IsReduction(n->op())) continue;
      acc_index_[n.get()] = static_cast<int>(acc_nodes_.size());
      acc_nodes_.push_back(n.get());
      k.accumulators.push_back({AccumulatorInit(n->op())});
    }
    // Reductions over the last dim alone split cleanly at row boundaries;
    // ones that also reduce outer dims accumulate across rows.
    const size_t rank = plan_.f_shape.size();
    k.parallel = true;
    k.split_align = 1;
    if (plan_.r_numel > 0) {
      bool outer_reduced = false;
      for (size_t d = 0; d + 1 < rank; ++d) outer_reduced |= plan_.f_reduced[d];
      if (outer_reduced)
        k.parallel = false;
      else
        k.split_align = k.row;
    }
    symbols_.main = prefix + "_main";
    symbols_.reduced = plan_.r_numel > 0 ? prefix + "_reduced" : "";
    RETURN_IF_ERROR(EmitMain(symbols_.main, k.row));
    if (plan_.r_numel > 0) RETURN_IF_ERROR(EmitReduced(symbols_.reduced));
    return absl::OkStatus();
  }

  const JitSymbols& symbols() const { return symbols_; }

 private:
  using Env = absl::flat_hash_map<const Value*, llvm::Value*>;

  llvm::Type* PtrTy() { return llvm::Type::getInt8PtrTy(ctx_); }
  llvm::Type* I64() { return llvm::Type::getInt64Ty(ctx_); }

  llvm::Function* NewFunction(const std::string& name, bool loop) {
    std::vector<llvm::Type*> args = {PtrTy()->getPointerTo()};
    if (loop) args.insert(args.end(), {I64(), I64()});
    auto* type =
        llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), args, false);
    auto* fn =
        llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, m_);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    return fn;
  }
  llvm::Value* Base(llvm::Value* ptrs, int index) {
    return b_.CreateLoad(PtrTy(), b_.CreateConstGEP1_64(PtrTy(), ptrs, index));
  }
  // A size derived from the region's shapes (an extent, a stride, a row
  // count): a constant, or in a shape-generic kernel the next entry of the
  // dims table (the pointer after the accumulators in `ptrs`), loaded at
  // the function's entry. Whether a dim is 0 or 1 stays in the code: it
  // decides broadcasting, so it is part of the kernel's structure.
  llvm::Value* Dim(int64_t c) {
    if (dims_ == nullptr) return b_.getInt64(c);
    const uint64_t slot = dims_->size();
    dims_->push_back(c);
    llvm::Function* fn = b_.GetInsertBlock()->getParent();
    llvm::BasicBlock& entry = fn->getEntryBlock();
    llvm::IRBuilder<> eb(&entry, entry.getFirstInsertionPt());
    const int index = scratch_index_ + 1 + num_accumulators_;
    llvm::Value* table = eb.CreateBitCast(
        eb.CreateLoad(PtrTy(),
                      eb.CreateConstGEP1_64(PtrTy(), fn->getArg(0), index)),
        I64()->getPointerTo());
    llvm::LoadInst* v =
        eb.CreateLoad(I64(), eb.CreateConstGEP1_64(I64(), table, slot),
                      absl::StrCat("dim", slot));
    v->setMetadata(llvm::LLVMContext::MD_invariant_load,
                   llvm::MDNode::get(ctx_, {}));
    return v;
  }
  llvm::Value* DimF(int64_t c) {
    if (dims_ == nullptr)
      return llvm::ConstantFP::get(b_.getDoubleTy(), static_cast<double>(c));
    return b_.CreateSIToFP(Dim(c), b_.getDoubleTy());
  }
  llvm::Instruction* Tag(llvm::Instruction* inst) {
    if (group_ != nullptr)
      inst->setMetadata(llvm::LLVMContext::MD_access_group, group_);
    return inst;
  }
  llvm::Value* Address(llvm::Type* elem, llvm::Value* base, llvm::Value* i) {
    return b_.CreateGEP(elem, b_.CreateBitCast(base, elem->getPointerTo()), i);
  }

  // Rounds an f32 register value to the storage precision of `t`, as storing
  // and reloading an eager tensor of that dtype does.
  llvm::Value* Round(llvm::Value* v, DType t) {
    if (t == DType::kF16) {
      return b_.CreateFPExt(b_.CreateFPTrunc(v, b_.getHalfTy()),
                            b_.getFloatTy());
    }
    if (t == DType::kBF16) return BF16ToFloat(FloatToBF16(v));
    return v;
  }
  // Round to nearest even; NaN stays a quiet NaN (ir/dtype.h BFloat16).
  llvm::Value* FloatToBF16(llvm::Value* v) {
    llvm::Value* u = b_.CreateBitCast(v, b_.getInt32Ty());
    llvm::Value* lsb = b_.CreateAnd(b_.CreateLShr(u, 16), b_.getInt32(1));
    llvm::Value* rounded = b_.CreateLShr(
        b_.CreateAdd(u, b_.CreateAdd(lsb, b_.getInt32(0x7fff))), 16);
    llvm::Value* quiet = b_.CreateOr(b_.CreateLShr(u, 16), b_.getInt32(0x40));
    llvm::Value* is_nan = b_.CreateFCmpUNO(v, v);
    return b_.CreateTrunc(b_.CreateSelect(is_nan, quiet, rounded),
                          b_.getInt16Ty());
  }
  llvm::Value* BF16ToFloat(llvm::Value* bits) {
    return b_.CreateBitCast(
        b_.CreateShl(b_.CreateZExt(bits, b_.getInt32Ty()), 16),
        b_.getFloatTy());
  }

  llvm::Value* Load(DType t, llvm::Value* base, llvm::Value* i) {
    llvm::Type* mem = MemType(ctx_, t);
    llvm::Value* raw = Tag(b_.CreateLoad(mem, Address(mem, base, i)));
    switch (t) {
      case DType::kBool:
        return b_.CreateICmpNE(raw, b_.getInt8(0));
      case DType::kF16:
        return b_.CreateFPExt(raw, b_.getFloatTy());
      case DType::kBF16:
        return BF16ToFloat(raw);
      default:
        return raw;
    }
  }
  void Store(DType t, llvm::Value* base, llvm::Value* i, llvm::Value* v) {
    llvm::Type* mem = MemType(ctx_, t);
    switch (t) {
      case DType::kBool:
        v = b_.CreateZExt(v, b_.getInt8Ty());
        break;
      case DType::kF16:
        v = b_.CreateFPTrunc(v, b_.getHalfTy());
        break;
      case DType::kBF16:
        v = FloatToBF16(v);
        break;
      default:
        break;
    }
    Tag(b_.CreateStore(v, Address(mem, base, i)));
  }

  // Converts like the eager Convert<To>(From); half types travel as f32.
  // Integers: sign-extended or truncated between widths; a float becomes an
  // integer only through kCast, which Emit refuses (out-of-range values are
  // undefined in the eager C++ conversion too).
  llvm::Value* Convert(llvm::Value* v, DType from, DType to) {
    if (from == to) return v;
    if (to == DType::kBool) {
      if (ir::IsIntegral(from))
        return b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
      return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
    }
    llvm::Type* reg = RegType(ctx_, to);
    if (ir::IsIntegral(to)) {
      if (from == DType::kBool) return b_.CreateZExt(v, reg);
      if (ir::IsIntegral(from)) return b_.CreateSExtOrTrunc(v, reg);
      return b_.CreateFPToSI(v, reg);
    }
    if (from == DType::kBool) return b_.CreateUIToFP(v, reg);
    if (ir::IsIntegral(from)) return Round(b_.CreateSIToFP(v, reg), to);
    if (v->getType() != reg) {
      v = reg->isDoubleTy() ? b_.CreateFPExt(v, reg) : b_.CreateFPTrunc(v, reg);
    }
    return Round(v, to);
  }

  // Integer arithmetic, two's complement as the eager kernels compute it:
  // add, sub, mul, neg, maximum, minimum and the comparisons.
  template <typename In>
  absl::StatusOr<llvm::Value*> EmitInteger(OpId op, In in) {
    switch (op) {
      case OpId::kAdd:
        return b_.CreateAdd(in(0), in(1));
      case OpId::kSub:
        return b_.CreateSub(in(0), in(1));
      case OpId::kMul:
        return b_.CreateMul(in(0), in(1));
      case OpId::kNeg:
        return b_.CreateNeg(in(0));
      case OpId::kMaximum: {
        llvm::Value *a = in(0), *c = in(1);
        return b_.CreateSelect(b_.CreateICmpSGE(a, c), a, c);
      }
      case OpId::kMinimum: {
        llvm::Value *a = in(0), *c = in(1);
        return b_.CreateSelect(b_.CreateICmpSLE(a, c), a, c);
      }
      case OpId::kEq:
        return b_.CreateICmpEQ(in(0), in(1));
      case OpId::kNe:
        return b_.CreateICmpNE(in(0), in(1));
      case OpId::kLt:
        return b_.CreateICmpSLT(in(0), in(1));
      case OpId::kLe:
        return b_.CreateICmpSLE(in(0), in(1));
      case OpId::kGt:
        return b_.CreateICmpSGT(in(0), in(1));
      case OpId::kGe:
        return b_.CreateICmpSGE(in(0), in(1));
      default:
        return Unsupported(
            absl::StrCat("integer arithmetic (", ir::OpName(op), ")"));
    }
  }

  absl::StatusOr<llvm::Value*> Emit(const Node& n, Env& env) {
    const OpId op = n.op();
    const DType out = n.output()->type().dtype;
    auto in = [&](size_t k, DType as) {
      const Value* v = n.inputs()[k];
      return Convert(env.at(v), v->type().dtype, as);
    };
    if (op == OpId::kFull && ir::IsIntegral(out)) {
      if (dims_ != nullptr && n.attrs().GetString(AttrKey::kRole) == kSizeRole)
        return Unsupported("an integer size in a shape-generic region");
      return llvm::ConstantInt::get(RegType(ctx_, out),
                                    static_cast<uint64_t>(static_cast<int64_t>(
                                        n.attrs().GetDouble(AttrKey::kValue))),
                                    /*isSigned=*/true);
    }
    if (op == OpId::kFull) {
      const double value = n.attrs().GetDouble(AttrKey::kValue);
      if (dims_ != nullptr && n.attrs().GetString(AttrKey::kRole) == kSizeRole)
        return Convert(DimF(static_cast<int64_t>(value)), DType::kF64, out);
      return Convert(llvm::ConstantFP::get(b_.getDoubleTy(), value),
                     DType::kF64, out);
    }
    if (IsOrderPreservingView(op)) return env.at(n.inputs()[0]);
    if (op == OpId::kCast && ir::IsIntegral(out) &&
        IsFloat(n.inputs()[0]->type().dtype)) {
      return Unsupported("a cast from a float to an integer");
    }
    if (op == OpId::kCast) return in(0, out);
    if (op == OpId::kWhere)
      return b_.CreateSelect(in(0, DType::kBool), in(1, out), in(2, out));
    // Operands are converted to the compute dtype first, as dispatch does.
    const DType compute = ComputeDType(n);
    if (compute == DType::kBool) return Unsupported("bool arithmetic");
    if (ir::IsIntegral(compute)) {
      return EmitInteger(op, [&](size_t k) { return in(k, compute); });
    }
    LlvmMath m{b_, m_, RegType(ctx_, compute)};
    std::optional<llvm::Value*> result =
        ApplyScalarDef(m, n, [&](size_t k) { return in(k, compute); });
    if (!result) return Unsupported(absl::StrCat("op ", ir::OpName(op)));
    return out == DType::kBool ? *result : Round(*result, out);
  }

  // The 0-d values of the current function, read from scratch slots.
  void LoadSlots(llvm::Value* ptrs, Env& env) {
    if (slots_.empty()) return;
    llvm::Value* scratch = Base(ptrs, scratch_index_);
    for (size_t s = 0; s < slots_.size(); ++s) {
      const Value* v = slots_[s];
      llvm::Type* reg = RegType(ctx_, v->type().dtype);
      llvm::Type* slot = reg->isIntegerTy(1) ? b_.getInt8Ty() : reg;
      llvm::Value* addr = b_.CreateBitCast(
          b_.CreateConstGEP1_64(
              b_.getInt64Ty(),
              b_.CreateBitCast(scratch, b_.getInt64Ty()->getPointerTo()), s),
          slot->getPointerTo());
      llvm::Value* x = b_.CreateLoad(slot, addr);
      env[v] = reg->isIntegerTy(1) ? b_.CreateICmpNE(x, b_.getInt8(0)) : x;
    }
  }

  absl::Status EmitScalar(const std::string& name) {
    llvm::Function* fn = NewFunction(name, false);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn));
    llvm::Value* ptrs = fn->getArg(0);
    Env env;
    for (size_t i = 0; i < body_.params().size(); ++i) {
      const Value* p = body_.params()[i];
      if (plan_.domain.contains(p) && plan_.domain.at(p) == Domain::kScalar) {
        env[p] = Load(p->type().dtype, Base(ptrs, static_cast<int>(i)),
                      b_.getInt64(0));
      }
    }
    for (const auto& n : body_.nodes()) {
      if (plan_.domain.at(n->output()) != Domain::kScalar) continue;
      ASSIGN_OR_RETURN(env[n->output()], Emit(*n, env));
    }
    if (!slots_.empty()) {
      llvm::Value* scratch = b_.CreateBitCast(Base(ptrs, scratch_index_),
                                              b_.getInt64Ty()->getPointerTo());
      for (size_t s = 0; s < slots_.size(); ++s) {
        llvm::Value* x = env.at(slots_[s]);
        if (x->getType()->isIntegerTy(1)) x = b_.CreateZExt(x, b_.getInt8Ty());
        b_.CreateStore(x, b_.CreateBitCast(b_.CreateConstGEP1_64(
                                               b_.getInt64Ty(), scratch, s),
                                           x->getType()->getPointerTo()));
      }
    }
    StoreReturns(Bases(ptrs), env, Domain::kScalar, b_.getInt64(0));
    b_.CreateRetVoid();
    return absl::OkStatus();
  }

  // Stores the returns of domain `d` at element i; `bases` holds one
  // pointer per param then per return, loaded before any loop.
  void StoreReturns(const std::vector<llvm::Value*>& bases, Env& env, Domain d,
                    llvm::Value* i) {
    const size_t np = body_.params().size();
    for (size_t k = 0; k < body_.returns().size(); ++k) {
      const Value* r = body_.returns()[k];
      if (plan_.domain.at(r) == d)
        Store(r->type().dtype, bases[np + k], i, env.at(r));
    }
  }
  std::vector<llvm::Value*> Bases(llvm::Value* ptrs) {
    std::vector<llvm::Value*> bases;
    for (size_t i = 0; i < body_.params().size() + body_.returns().size();
         ++i) {
      bases.push_back(Base(ptrs, static_cast<int>(i)));
    }
    return bases;
  }

  // Marks `latch` as the back edge of a loop whose iterations touch disjoint
  // elements (in-place updates write the element they read).
  void MarkParallel(llvm::BranchInst* latch) {
    llvm::Metadata* par[] = {
        llvm::MDString::get(ctx_, "llvm.loop.parallel_accesses"), group_};
    auto self = llvm::MDNode::getTemporary(ctx_, llvm::None);
    llvm::Metadata* ops[] = {self.get(), llvm::MDNode::get(ctx_, par)};
    llvm::MDNode* loop = llvm::MDNode::getDistinct(ctx_, ops);
    loop->replaceOperandWith(0, loop);
    latch->setMetadata(llvm::LLVMContext::MD_loop, loop);
  }

  // A broadcast param's offset at the row start and its last-dim stride.
  using RowBases =
      absl::flat_hash_map<const Value*, std::pair<llvm::Value*, int64_t>>;

  // Everything the row-loop function's emission steps hand on to the next.
  struct RowLoop {
    llvm::BasicBlock *entry, *rows, *inner, *row_end, *exit;
    llvm::Value *begin, *end, *row_c, *r0, *r_end;
    Env env;  // the scalar slots, loaded once in the entry block
    std::vector<llvm::Value*> bases, accs;
    bool last_reduced;
    // Per row.
    llvm::PHINode* r;
    llvm::Value *row_start, *jb, *je, *acc_row;
    RowBases bcast;
    // Per element.
    llvm::PHINode* j;
    llvm::Value* i;
    Env inner_env;
    // Last-dim reductions accumulate in registers.
    std::vector<llvm::PHINode*> reg_acc;
    std::vector<llvm::Value*> reg_next;
  };

  // The main function walks elements [begin, end) of F row by row, so the
  // offsets into broadcast operands and accumulators are computed once per
  // row, not per element.
  absl::Status EmitMain(const std::string& name, int64_t row) {
    RowLoop l = OpenRowLoop(name, row);
    EmitRowHeader(l);
    OpenInnerLoop(l);
    LoadOperands(l);
    RETURN_IF_ERROR(EmitElement(l));
    StoreReturns(l.bases, l.inner_env, Domain::kFull, l.i);
    CloseInnerLoop(l);
    CloseRowLoop(l);
    return absl::OkStatus();
  }

  // Creates the function and its blocks; the entry block loads what every
  // row shares and turns the element range into a row range.
  RowLoop OpenRowLoop(const std::string& name, int64_t row) {
    llvm::Function* fn = NewFunction(name, true);
    RowLoop l;
    l.entry = llvm::BasicBlock::Create(ctx_, "entry", fn);
    l.rows = llvm::BasicBlock::Create(ctx_, "row", fn);
    l.inner = llvm::BasicBlock::Create(ctx_, "inner", fn);
    l.row_end = llvm::BasicBlock::Create(ctx_, "row_end", fn);
    l.exit = llvm::BasicBlock::Create(ctx_, "exit", fn);
    llvm::Value* ptrs = fn->getArg(0);
    l.begin = fn->getArg(1);
    l.end = fn->getArg(2);
    l.last_reduced = plan_.r_numel > 0 && plan_.f_reduced.back();
    b_.SetInsertPoint(l.entry);
    LoadSlots(ptrs, l.env);
    l.bases = Bases(ptrs);
    l.accs = Accumulators(ptrs);
    l.row_c = Dim(row);
    l.r0 = b_.CreateSDiv(l.begin, l.row_c);
    l.r_end = b_.CreateSDiv(
        b_.CreateAdd(l.end, b_.CreateSub(l.row_c, b_.getInt64(1))), l.row_c);
    b_.CreateCondBr(b_.CreateICmpSLT(l.begin, l.end), l.rows, l.exit);
    return l;
  }

  // Per row: the element window [jb, je) and the row's offsets into
  // broadcast operands and into the accumulators.
  void EmitRowHeader(RowLoop& l) {
    b_.SetInsertPoint(l.rows);
    l.r = b_.CreatePHI(I64(), 2);
    l.r->addIncoming(l.r0, l.entry);
    l.row_start = b_.CreateMul(l.r, l.row_c);
    llvm::Value* from_begin = b_.CreateSub(l.begin, l.row_start);
    l.jb = b_.CreateSelect(b_.CreateICmpSGT(from_begin, b_.getInt64(0)),
                           from_begin, b_.getInt64(0));
    llvm::Value* to_end = b_.CreateSub(l.end, l.row_start);
    l.je = b_.CreateSelect(b_.CreateICmpSLT(to_end, l.row_c), to_end, l.row_c);
    const std::vector<llvm::Value*> outer_idx = OuterIndex(l.r);
    l.acc_row = RowOffset(outer_idx, AccumulatorStrides());
    l.bcast = BroadcastRowBases(outer_idx);
    b_.CreateBr(l.inner);
  }

  // F's multi-index of row `r`, dims [0, rank-1); empty without a row loop,
  // where the single "row" is all of F.
  std::vector<llvm::Value*> OuterIndex(llvm::PHINode* r) {
    if (!plan_.row_loop) return {};
    const ir::Shape& f = plan_.f_shape;
    int64_t inner_extent = 1;
    std::vector<llvm::Value*> rev;
    for (size_t d = f.size() - 1; d-- > 0;) {
      llvm::Value* q = inner_extent == 1 ? static_cast<llvm::Value*>(r)
                                         : b_.CreateUDiv(r, Dim(inner_extent));
      rev.push_back(b_.CreateURem(q, Dim(f[d])));
      inner_extent *= f[d];
    }
    return {rev.rbegin(), rev.rend()};
  }

  // Element strides of an operand of `shape` broadcast against F.
  std::vector<int64_t> BroadcastStrides(const ir::Shape& shape) const {
    return codegen::BroadcastStrides(shape, plan_.f_shape);
  }

  // Accumulator strides: kept dims only, row-major over R.
  std::vector<int64_t> AccumulatorStrides() const {
    const ir::Shape& f = plan_.f_shape;
    std::vector<int64_t> s(f.size(), 0);
    if (plan_.r_numel == 0) return s;
    int64_t stride = 1;
    for (size_t d = f.size(); d-- > 0;) {
      if (!plan_.f_reduced[d]) {
        s[d] = stride;
        stride *= f[d];
      }
    }
    return s;
  }

  // The offset of the row at `outer_idx` in a buffer with element strides `s`.
  llvm::Value* RowOffset(const std::vector<llvm::Value*>& outer_idx,
                         const std::vector<int64_t>& s) {
    llvm::Value* off = b_.getInt64(0);
    for (size_t d = 0; d + 1 < s.size() && plan_.row_loop; ++d) {
      if (s[d] != 0)
        off = b_.CreateAdd(off, b_.CreateMul(outer_idx[d], Dim(s[d])));
    }
    return off;
  }

  // The row bases of the params the loop reads broadcast (neither full nor
  // a scalar slot); their offsets are emitted in first-use order.
  RowBases BroadcastRowBases(const std::vector<llvm::Value*>& outer_idx) {
    RowBases bcast;
    for (const auto& n : body_.nodes()) {
      if (plan_.domain.at(n->output()) != Domain::kFull) continue;
      for (const Value* v : n->inputs()) {
        if (!body_.IsParam(v) || bcast.contains(v)) continue;
        auto it = plan_.domain.find(v);
        if (it != plan_.domain.end() &&
            (it->second == Domain::kScalar || it->second == Domain::kFull))
          continue;
        const std::vector<int64_t> s = BroadcastStrides(v->type().shape);
        bcast[v] = {RowOffset(outer_idx, s), s.back()};
      }
    }
    return bcast;
  }

  // The inner loop's header: the element index j within the row and, for
  // last-dim reductions, the register accumulators that start each row fresh.
  void OpenInnerLoop(RowLoop& l) {
    b_.SetInsertPoint(l.inner);
    group_ = llvm::MDNode::getDistinct(ctx_, {});
    l.j = b_.CreatePHI(I64(), 2);
    l.j->addIncoming(l.jb, l.rows);
    if (l.last_reduced) {
      for (size_t a = 0; a < l.accs.size(); ++a) {
        const OpId op = acc_nodes_[a]->op();
        llvm::PHINode* p = b_.CreatePHI(RegisterType(op), 2);
        p->addIncoming(RegisterInit(op), l.rows);
        l.reg_acc.push_back(p);
      }
    }
    l.i = b_.CreateAdd(l.row_start, l.j);
  }

  // Loads element i of each full param and the row's element of each
  // broadcast param.
  void LoadOperands(RowLoop& l) {
    l.inner_env = l.env;
    for (size_t k = 0; k < body_.params().size(); ++k) {
      const Value* p = body_.params()[k];
      auto it = plan_.domain.find(p);
      if (it != plan_.domain.end() && it->second == Domain::kFull) {
        l.inner_env[p] = Load(p->type().dtype, l.bases[k], l.i);
      } else if (auto bc = l.bcast.find(p); bc != l.bcast.end()) {
        llvm::Value* idx = bc->second.first;
        if (bc->second.second != 0)
          idx = b_.CreateAdd(idx,
                             b_.CreateMul(l.j, b_.getInt64(bc->second.second)));
        l.inner_env[p] = Load(p->type().dtype, l.bases[k], idx);
      }
    }
  }

  // The full-domain nodes for one element, with each reduction folding its
  // input into its accumulator.
  absl::Status EmitElement(RowLoop& l) {
    l.reg_next.assign(l.reg_acc.begin(), l.reg_acc.end());
    for (const auto& n : body_.nodes()) {
      if (IsReduction(n->op())) {
        AccumulateElement(l, *n);
        continue;
      }
      if (plan_.domain.at(n->output()) != Domain::kFull) continue;
      ASSIGN_OR_RETURN(l.inner_env[n->output()], Emit(*n, l.inner_env));
    }
    return absl::OkStatus();
  }

  // Last-dim reductions add to a register; the others read-modify-write
  // their accumulator element, which no other iteration of the row touches.
  void AccumulateElement(RowLoop& l, const Node& n) {
    const int a = acc_index_.at(&n);
    const Value* src = n.inputs()[0];
    llvm::Value* x =
        Convert(l.inner_env.at(src), src->type().dtype, DType::kF64);
    if (l.last_reduced) {
      l.reg_next[a] = AccumulateRegister(n.op(), l.reg_next[a], x);
      return;
    }
    llvm::Value* addr =
        Address(b_.getDoubleTy(), l.accs[a], b_.CreateAdd(l.acc_row, l.j));
    llvm::Value* old = Tag(b_.CreateLoad(b_.getDoubleTy(), addr));
    Tag(b_.CreateStore(Accumulate(n.op(), old, x, /*reassociable=*/true),
                       addr));
  }

  // The inner loop's back edge, marked parallel: its iterations touch
  // disjoint elements.
  void CloseInnerLoop(RowLoop& l) {
    llvm::Value* j_next = b_.CreateAdd(l.j, b_.getInt64(1));
    llvm::BasicBlock* inner_last = b_.GetInsertBlock();
    l.j->addIncoming(j_next, inner_last);
    for (size_t a = 0; a < l.reg_acc.size(); ++a)
      l.reg_acc[a]->addIncoming(l.reg_next[a], inner_last);
    MarkParallel(
        b_.CreateCondBr(b_.CreateICmpSLT(j_next, l.je), l.inner, l.row_end));
    group_ = nullptr;
  }

  // After each row: fold the row's register accumulators into the
  // accumulator buffers, then the row loop's back edge.
  void CloseRowLoop(RowLoop& l) {
    b_.SetInsertPoint(l.row_end);
    for (size_t a = 0; a < l.reg_acc.size(); ++a) {
      llvm::Value* addr = Address(b_.getDoubleTy(), l.accs[a], l.acc_row);
      b_.CreateStore(
          Accumulate(acc_nodes_[a]->op(), b_.CreateLoad(b_.getDoubleTy(), addr),
                     RegisterValue(acc_nodes_[a]->op(), l.reg_next[a]),
                     /*reassociable=*/false),
          addr);
    }
    llvm::Value* r_next = b_.CreateAdd(l.r, b_.getInt64(1));
    l.r->addIncoming(r_next, l.row_end);
    b_.CreateCondBr(b_.CreateICmpSLT(r_next, l.r_end), l.rows, l.exit);
    b_.SetInsertPoint(l.exit);
    b_.CreateRetVoid();
  }

  static double AccumulatorInit(OpId op) {
    return op == OpId::kAmax ? -std::numeric_limits<double>::infinity() : 0.0;
  }
  // acc (+) x in double (amax propagates NaN, as eager's does). Sums inside
  // a row loop may be reassociated, so the vectorizer blocks them.
  llvm::Value* Accumulate(OpId op, llvm::Value* acc, llvm::Value* x,
                          bool reassociable) {
    if (op == OpId::kAmax) {
      return b_.CreateSelect(
          b_.CreateOr(b_.CreateFCmpUNO(x, x), b_.CreateFCmpOGT(x, acc)), x,
          acc);
    }
    llvm::Value* sum = b_.CreateFAdd(acc, x);
    if (reassociable) {
      llvm::FastMathFlags fmf;
      fmf.setAllowReassoc();
      llvm::cast<llvm::Instruction>(sum)->setFastMathFlags(fmf);
    }
    return sum;
  }
  // A row register accumulating amax holds an int64 key, not a double: the
  // vectorizer turns an integer max into a vector reduction, but not a
  // NaN-propagating double select. Keys order as their doubles do; a NaN
  // gets the largest key, which wins every max and decodes to a NaN.
  static bool KeyedAccumulator(OpId op) { return op == OpId::kAmax; }
  llvm::Type* RegisterType(OpId op) {
    return KeyedAccumulator(op) ? I64() : b_.getDoubleTy();
  }
  llvm::Value* RegisterInit(OpId op) {  // folds to a constant
    llvm::Value* init =
        llvm::ConstantFP::get(b_.getDoubleTy(), AccumulatorInit(op));
    return KeyedAccumulator(op) ? MaxKey(init) : init;
  }
  llvm::Value* FlipLowBits(llvm::Value* bits) {
    return b_.CreateXor(
        bits, b_.CreateAnd(b_.CreateAShr(bits, 63),
                           b_.getInt64(std::numeric_limits<int64_t>::max())));
  }
  llvm::Value* MaxKey(llvm::Value* x) {
    return b_.CreateSelect(b_.CreateFCmpUNO(x, x),
                           b_.getInt64(std::numeric_limits<int64_t>::max()),
                           FlipLowBits(b_.CreateBitCast(x, I64())));
  }
  // acc (+) x for a row register (x in double); RegisterValue reads it back.
  llvm::Value* AccumulateRegister(OpId op, llvm::Value* acc, llvm::Value* x) {
    if (!KeyedAccumulator(op)) return Accumulate(op, acc, x, true);
    llvm::Value* key = MaxKey(x);
    return b_.CreateSelect(b_.CreateICmpSGT(key, acc), key, acc);
  }
  llvm::Value* RegisterValue(OpId op, llvm::Value* reg) {
    return KeyedAccumulator(op)
               ? b_.CreateBitCast(FlipLowBits(reg), b_.getDoubleTy())
               : reg;
  }
  // The accumulator buffers (f64), after the scratch slots in `ptrs`.
  std::vector<llvm::Value*> Accumulators(llvm::Value* ptrs) {
    std::vector<llvm::Value*> accs;
    for (size_t a = 0; a < acc_nodes_.size(); ++a) {
      accs.push_back(
          b_.CreateBitCast(Base(ptrs, scratch_index_ + 1 + static_cast<int>(a)),
                           b_.getDoubleTy()->getPointerTo()));
    }
    return accs;
  }

  absl::Status EmitReduced(const std::string& name) {
    const size_t np = body_.params().size();
    llvm::Function* fn = NewFunction(name, true);
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn);
    auto* loop = llvm::BasicBlock::Create(ctx_, "loop", fn);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn);
    llvm::Value* ptrs = fn->getArg(0);
    llvm::Value* begin = fn->getArg(1);
    llvm::Value* end = fn->getArg(2);
    b_.SetInsertPoint(entry);
    Env env;
    LoadSlots(ptrs, env);
    const std::vector<llvm::Value*> bases = Bases(ptrs);
    const std::vector<llvm::Value*> accs = Accumulators(ptrs);
    b_.CreateCondBr(b_.CreateICmpSLT(begin, end), loop, exit);
    b_.SetInsertPoint(loop);
    group_ = llvm::MDNode::getDistinct(ctx_, {});
    llvm::PHINode* i = b_.CreatePHI(I64(), 2);
    i->addIncoming(begin, entry);
    llvm::Value* count = DimF(plan_.f_numel / plan_.r_numel);
    for (size_t k = 0; k < np; ++k) {
      const Value* p = body_.params()[k];
      auto it = plan_.domain.find(p);
      if (it != plan_.domain.end() && it->second == Domain::kReduced)
        env[p] = Load(p->type().dtype, bases[k], i);
    }
    for (const auto& n : body_.nodes()) {
      if (plan_.domain.at(n->output()) != Domain::kReduced) continue;
      if (IsReduction(n->op())) {
        llvm::Value* v = Tag(b_.CreateLoad(
            b_.getDoubleTy(),
            Address(b_.getDoubleTy(), accs[acc_index_.at(n.get())], i)));
        if (n->op() == OpId::kMean) v = b_.CreateFDiv(v, count);
        env[n->output()] = Convert(v, DType::kF64, n->output()->type().dtype);
        continue;
      }
      ASSIGN_OR_RETURN(env[n->output()], Emit(*n, env));
    }
    StoreReturns(bases, env, Domain::kReduced, i);
    llvm::Value* next = b_.CreateAdd(i, b_.getInt64(1));
    i->addIncoming(next, b_.GetInsertBlock());
    MarkParallel(b_.CreateCondBr(b_.CreateICmpSLT(next, end), loop, exit));
    group_ = nullptr;
    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
    return absl::OkStatus();
  }

  // ---- The row plan (codegen/region_plan.h): main walks whole rows, each
  // through its phases; `reduced` finishes the totals over all rows.

  absl::Status RunRows(const std::string& prefix, RegionKernel& k) {
    k.row = plan_.row_len;
    k.numel = plan_.f_numel;
    k.parallel = !plan_.has_totals;
    k.split_align = plan_.row_len;
    k.reduced_numel = plan_.has_totals ? 1 : 0;
    for (const auto& n : body_.nodes()) {
      if (!IsReduction(n->op()) ||
          plan_.domain.at(n->output()) != Domain::kTotal)
        continue;
      acc_index_[n.get()] = static_cast<int>(acc_nodes_.size());
      acc_nodes_.push_back(n.get());
      k.accumulators.push_back({AccumulatorInit(n->op())});
    }
    symbols_.main = prefix + "_main";
    symbols_.reduced = plan_.has_totals ? prefix + "_reduced" : "";
    RETURN_IF_ERROR(EmitRows(symbols_.main));
    if (plan_.has_totals) RETURN_IF_ERROR(EmitTotals(symbols_.reduced));
    return absl::OkStatus();
  }

  // What the row function's emission steps share.
  struct Row {
    llvm::Value* ptrs;
    std::vector<llvm::Value*> bases, accs;
    Env env;  // the scalar slots, then the row's values as they are known
    llvm::PHINode* r;
    llvm::Value* row_start;
    llvm::Value* len;                                       // the row length
    absl::flat_hash_map<const Value*, llvm::Value*> bcast;  // row offsets
  };

  absl::Status EmitRows(const std::string& name) {
    llvm::Function* fn = NewFunction(name, true);
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn);
    auto* rows = llvm::BasicBlock::Create(ctx_, "row", fn);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn);
    b_.SetInsertPoint(entry);
    Row w;
    w.ptrs = fn->getArg(0);
    LoadSlots(w.ptrs, w.env);
    w.bases = Bases(w.ptrs);
    w.accs = Accumulators(w.ptrs);
    llvm::Value* len = w.len = Dim(plan_.row_len);
    llvm::Value* r0 = b_.CreateSDiv(fn->getArg(1), len);
    llvm::Value* r_end = b_.CreateSDiv(fn->getArg(2), len);
    b_.CreateCondBr(b_.CreateICmpSLT(r0, r_end), rows, exit);
    b_.SetInsertPoint(rows);
    w.r = b_.CreatePHI(I64(), 2);
    w.r->addIncoming(r0, entry);
    w.row_start = b_.CreateMul(w.r, len);
    RETURN_IF_ERROR(RowStart(w));
    for (int phase = 1; phase <= plan_.row_phases; ++phase) {
      RETURN_IF_ERROR(EmitPass(w, phase));
      RETURN_IF_ERROR(EmitRowValues(w, phase));
    }
    if (HasReturns(Domain::kFull))
      RETURN_IF_ERROR(EmitPass(w, plan_.row_phases + 1));
    StoreReturns(w.bases, w.env, Domain::kReduced, w.r);
    FoldTotals(w);
    llvm::Value* next = b_.CreateAdd(w.r, b_.getInt64(1));
    w.r->addIncoming(next, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpSLT(next, r_end), rows, exit);
    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
    return absl::OkStatus();
  }

  bool HasReturns(Domain d) const {
    return absl::c_any_of(body_.returns(), [&](const Value* r) {
      return plan_.domain.at(r) == d;
    });
  }

  // At the row start: the broadcast params' row offsets, the row's params
  // and the row values computed from them alone.
  absl::Status RowStart(Row& w) {
    const size_t rank = plan_.f_shape.size();
    std::vector<llvm::Value*> idx(rank, nullptr);
    if (!plan_.row_stride.empty()) {  // r as an index over F's leading dims
      llvm::Value* q = w.r;
      for (size_t d = rank; d-- > 0;) {
        if (plan_.f_reduced[d]) continue;
        llvm::Value* extent = Dim(plan_.f_shape[d]);
        idx[d] = b_.CreateURem(q, extent);
        q = b_.CreateUDiv(q, extent);
      }
    }
    for (size_t k = 0; k < body_.params().size(); ++k) {
      const Value* p = body_.params()[k];
      if (plan_.row_stride.contains(p)) {
        const std::vector<int64_t> s = BroadcastStrides(p->type().shape);
        llvm::Value* off = b_.getInt64(0);
        for (size_t d = 0; d < rank; ++d) {
          if (!plan_.f_reduced[d] && s[d] != 0)
            off = b_.CreateAdd(off, b_.CreateMul(idx[d], Dim(s[d])));
        }
        w.bcast[p] = off;
      } else if (auto it = plan_.domain.find(p);
                 it != plan_.domain.end() && it->second == Domain::kReduced) {
        w.env[p] = Load(p->type().dtype, w.bases[k], w.r);
      }
    }
    return EmitRowValues(w, 0);
  }

  // The row values of level `level` that are not reductions' results.
  absl::Status EmitRowValues(Row& w, int level) {
    for (const auto& n : body_.nodes()) {
      const Value* out = n->output();
      if (IsReduction(n->op()) || plan_.domain.at(out) != Domain::kReduced ||
          plan_.level.at(out) != level)
        continue;
      ASSIGN_OR_RETURN(w.env[out], Emit(*n, w.env));
    }
    return absl::OkStatus();
  }

  // One loop over the row's elements: phase k's reductions fold their
  // inputs in registers; the final pass stores the full returns.
  absl::Status EmitPass(Row& w, int phase) {
    const bool final = phase > plan_.row_phases;
    const RowPassWork work = codegen::RowPass(body_, plan_, phase);
    const absl::flat_hash_set<const Node*>& nodes = work.nodes;
    const std::vector<const Node*>& reds = work.reductions;
    llvm::Function* fn = b_.GetInsertBlock()->getParent();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(ctx_, "pass", fn);
    auto* after = llvm::BasicBlock::Create(ctx_, "pass_end", fn);
    b_.CreateBr(loop);
    b_.SetInsertPoint(loop);
    group_ = llvm::MDNode::getDistinct(ctx_, {});
    llvm::PHINode* j = b_.CreatePHI(I64(), 2);
    j->addIncoming(b_.getInt64(0), pre);
    std::vector<llvm::PHINode*> acc;
    std::vector<llvm::Value*> next;
    for (const Node* n : reds) {
      acc.push_back(b_.CreatePHI(RegisterType(n->op()), 2));
      acc.back()->addIncoming(RegisterInit(n->op()), pre);  // a constant
    }
    Env env = w.env;
    llvm::Value* i = b_.CreateAdd(w.row_start, j);
    absl::flat_hash_set<const Value*> read(body_.returns().begin(),
                                           body_.returns().end());
    for (const Node* n : nodes)
      read.insert(n->inputs().begin(), n->inputs().end());
    for (const Node* n : reds) read.insert(n->inputs()[0]);
    LoadRowOperands(w, read, j, i, env);
    for (const auto& n : body_.nodes()) {
      if (!nodes.contains(n.get())) continue;
      if (n->op() == OpId::kArange) {
        env[n->output()] = Convert(b_.CreateSIToFP(j, b_.getDoubleTy()),
                                   DType::kF64, n->output()->type().dtype);
        continue;
      }
      ASSIGN_OR_RETURN(env[n->output()], Emit(*n, env));
    }
    for (size_t a = 0; a < reds.size(); ++a) {
      const Value* src = reds[a]->inputs()[0];
      next.push_back(AccumulateRegister(
          reds[a]->op(), acc[a],
          Convert(env.at(src), src->type().dtype, DType::kF64)));
    }
    if (final) StoreReturns(w.bases, env, Domain::kFull, i);
    llvm::Value* j_next = b_.CreateAdd(j, b_.getInt64(1));
    j->addIncoming(j_next, b_.GetInsertBlock());
    for (size_t a = 0; a < reds.size(); ++a)
      acc[a]->addIncoming(next[a], b_.GetInsertBlock());
    MarkParallel(b_.CreateCondBr(b_.CreateICmpSLT(j_next, w.len), loop, after));
    group_ = nullptr;
    b_.SetInsertPoint(after);
    for (size_t a = 0; a < reds.size(); ++a) {
      llvm::Value* v = RegisterValue(reds[a]->op(), next[a]);
      if (reds[a]->op() == OpId::kMean)
        v = b_.CreateFDiv(v, b_.CreateSIToFP(w.len, b_.getDoubleTy()));
      w.env[reds[a]->output()] =
          Convert(v, DType::kF64, reds[a]->output()->type().dtype);
    }
    return absl::OkStatus();
  }

  // Element i (j within the row) of the full params in `read`, and of the
  // broadcast ones at their row offset.
  void LoadRowOperands(Row& w, const absl::flat_hash_set<const Value*>& read,
                       llvm::Value* j, llvm::Value* i, Env& env) {
    for (size_t k = 0; k < body_.params().size(); ++k) {
      const Value* p = body_.params()[k];
      if (!read.contains(p)) continue;
      auto it = plan_.domain.find(p);
      if (it != plan_.domain.end() && it->second == Domain::kFull) {
        env[p] = Load(p->type().dtype, w.bases[k], i);
      } else if (auto bc = w.bcast.find(p); bc != w.bcast.end()) {
        llvm::Value* idx = plan_.row_stride.at(p) == 0
                               ? bc->second
                               : b_.CreateAdd(bc->second, j);
        env[p] = Load(p->type().dtype, w.bases[k], idx);
      }
    }
  }

  // After the row: each total folds the row's value, in row order.
  void FoldTotals(Row& w) {
    for (size_t a = 0; a < acc_nodes_.size(); ++a) {
      const Value* src = acc_nodes_[a]->inputs()[0];
      llvm::Value* x = Convert(w.env.at(src), src->type().dtype, DType::kF64);
      llvm::Value* addr = w.accs[a];
      b_.CreateStore(Accumulate(acc_nodes_[a]->op(),
                                b_.CreateLoad(b_.getDoubleTy(), addr), x,
                                /*reassociable=*/false),
                     addr);
    }
  }

  // After every row: the totals' values and the 0-d work that follows them.
  absl::Status EmitTotals(const std::string& name) {
    llvm::Function* fn = NewFunction(name, true);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn));
    llvm::Value* ptrs = fn->getArg(0);
    Env env;
    LoadSlots(ptrs, env);
    const std::vector<llvm::Value*> bases = Bases(ptrs);
    const std::vector<llvm::Value*> accs = Accumulators(ptrs);
    for (const auto& n : body_.nodes()) {
      if (plan_.domain.at(n->output()) != Domain::kTotal) continue;
      if (!IsReduction(n->op())) {
        ASSIGN_OR_RETURN(env[n->output()], Emit(*n, env));
        continue;
      }
      llvm::Value* v =
          b_.CreateLoad(b_.getDoubleTy(), accs[acc_index_.at(n.get())]);
      if (n->op() == OpId::kMean) v = b_.CreateFDiv(v, DimF(plan_.rows));
      env[n->output()] = Convert(v, DType::kF64, n->output()->type().dtype);
    }
    StoreReturns(bases, env, Domain::kTotal, b_.getInt64(0));
    b_.CreateRetVoid();
    return absl::OkStatus();
  }

  const ir::Graph& body_;
  const Plan& plan_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  llvm::MDNode* group_ = nullptr;
  int scratch_index_ = 0;
  int num_accumulators_ = 0;
  // The 0-d values the loops read, by scratch slot, in first-use order. A
  // vector, not a map keyed by Value*: the emitted code walks the slots, and
  // an address-keyed order would differ between processes and defeat the disk
  // cache (tests/codegen/deterministic_codegen_test.cc).
  std::vector<const Value*> slots_;
  absl::flat_hash_map<const Node*, int> acc_index_;
  std::vector<const Node*> acc_nodes_;  // by accumulator index
  JitSymbols symbols_;
  std::vector<int64_t>* dims_ = nullptr;  // set for a shape-generic kernel
};

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

}  // namespace

absl::StatusOr<RegionKernel> CompileRegion(
    const ir::Graph& original, const RegionCompileOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  // Lowered over coalesced dims where they merge (the operands' layout is
  // the same); a shape-generic kernel keeps the body's own dims, whose
  // sizes it reads at run time.
  const std::unique_ptr<ir::Graph> coalesced =
      options.shape_generic ? nullptr : CoalesceDims(original);
  const ir::Graph& body = coalesced != nullptr ? *coalesced : original;
  ASSIGN_OR_RETURN(Plan plan, Analyze(body, {.allow_integers = true,
                                             .allow_row_phases = true}));
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>("stepjit", *ctx);
  // Symbols derive from the body's text, so a later process emits the same
  // IR for the same region and finds it in the disk cache. The text leaves
  // out the region's name: the fuse pass numbers regions, and bodies that
  // differ only in that number (a bias gradient per layer) share a kernel.
  std::string text = ir::Print(body);
  if (const std::string header = absl::StrCat("graph @", body.name(), "(");
      absl::StartsWith(text, header)) {
    text.replace(0, header.size(), "graph @region(");
  }
  if (options.shape_generic) text = EraseSizes(text);
  const std::string hash =
      ToHex(Sha256Of(absl::StrCat(text, kLoweringVersion,
                                  options.shape_generic ? ";generic" : "")))
          .substr(0, 12);
  const std::string prefix = absl::StrCat("sj_", hash);
  RegionKernel k;
  k.name = absl::StrCat(body.name(), "_", hash);
  Lowering lowering(plan.Body(body), plan, *ctx, *module,
                    options.shape_generic ? &k.dims : nullptr);
  RETURN_IF_ERROR(lowering.Run(prefix, k));
  std::string verify;
  llvm::raw_string_ostream vos(verify);
  if (llvm::verifyModule(*module, &vos)) {
    return absl::InternalError(absl::StrCat(
        "generated LLVM IR for ", body.name(), " is invalid: ", vos.str()));
  }
  ASSIGN_OR_RETURN(JitLoadResult loaded,
                   JitLoad(*module, lowering.symbols(),
                           {.want_optimized_ir = options.want_optimized_ir,
                            .use_cache = options.use_cache,
                            .cache_tag = kLoweringVersion}));
  k.scalar = reinterpret_cast<ScalarFn>(loaded.fns.scalar);
  k.main = reinterpret_cast<LoopFn>(loaded.fns.main);
  k.reduced = reinterpret_cast<LoopFn>(loaded.fns.reduced);
  k.llvm_ir_raw = std::move(loaded.llvm_ir_raw);
  k.llvm_ir = std::move(loaded.llvm_ir);
  k.cache_key = std::move(loaded.cache_key);
  k.cache_hit = loaded.cache_hit;
  k.compile_ms = MsSince(t0);
  return k;
}

}  // namespace stepjit::codegen::cpu
